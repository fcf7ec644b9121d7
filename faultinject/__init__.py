"""Fault injection for the RCM suite.

* ``faultinject.sim``: a deterministic discrete-event simulator that runs the
  real sans-IO site stacks over a simulated, faulty network;
* ``faultinject.checkers``: the RCM properties as functions over journal
  records (simulated or real);
* link proxies, scenarios and the scenario runner for real processes;
* ``python -m faultinject {sim,run,check}``.
"""
