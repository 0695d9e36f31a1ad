"""The tools built on the library: the ``pydsm`` command line
(:mod:`pydsm.tools.cli`), the demo of every experiment
(:mod:`pydsm.tools.demo`), the C benchmark runner and its plots
(:mod:`pydsm.tools.bench`), the driver-path benchmarks
(:mod:`pydsm.tools.pathbench`) and the memcached server launcher
(:mod:`pydsm.tools.serve`)."""
