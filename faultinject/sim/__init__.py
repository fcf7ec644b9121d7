"""Deterministic discrete-event simulator running the real sans-IO RCM stacks."""
from .cluster import SIM_SETTINGS, SimConfig, SimResult, Simulation, simulate
from .measure import measure, percentile
from .network import EventLoop, LinkModel, Network, SimError

__all__ = ["SIM_SETTINGS", "EventLoop", "LinkModel", "Network", "SimConfig", "SimError",
           "SimResult", "Simulation", "measure", "percentile", "simulate"]
