"""spark_archive package."""
