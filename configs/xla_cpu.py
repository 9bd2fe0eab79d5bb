"""XLA:CPU flags that compile fastest: the test session's and CI checks'.

Each keeps the HLO and XLA's HLO passes (fusion, layout, sharding) as they
are and changes only how the CPU code is made, so tests still check what
the compiled HLO computes; training runs and benchmarks keep XLA's
defaults. Measured on 2-core VMs:

* `--xla_backend_optimization_level=0`, LLVM's optimisation level 0: a
  smoke run from a cold cache took a quarter less CPU time (59 -> 45 s),
  the suite, mostly compiles, a sixth less (786 -> 651 s).
* `--xla_cpu_use_thunk_runtime=false`, XLA:CPU's whole-program runtime (one
  LLVM module per program instead of one kernel per fusion): a smoke run
  took 36 s instead of 42 from a cold cache and 18 instead of 21 from a
  warm one.
* `--xla_cpu_use_fusion_emitters=false`, the elemental fusion emitters
  instead of the MLIR ones (other code for the same fusions): a process
  that builds and runs one tiny-preset RL step took 0.76x the CPU time
  (median of 8 interleaved pairs), a cold smoke run 0.83x (4 pairs), the
  test suite 0.79x the wall time (606 against 779 s, 2 pairs), and a
  third less peak memory.
"""

FAST_COMPILE = (
  "--xla_backend_optimization_level=0 --xla_cpu_use_thunk_runtime=false"
  " --xla_cpu_use_fusion_emitters=false"
)
