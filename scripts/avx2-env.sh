# Source this to make numba compile hpcgc's kernels for an AMD EPYC Zen 3 (AVX2, no AVX-512) on
# any x86-64 host that can run AVX2 code:
#
#     source scripts/avx2-env.sh          # then e.g. python -m hpcgc.bench micro -c qsgd:s=4 ...
#
# numba targets the host by default (llvmlite's get_host_cpu_name/get_host_cpu_features).
# NUMBA_CPU_NAME alone only changes the tuning: the host's feature list (AVX-512 included) still
# applies, so the feature list is set too — LLVM's znver3 features, every AVX-512 feature off.
# numba keys its cache on the CPU name and features, so the AVX2 kernels are cached next to the
# host's. `micro` prints the target it compiled for (docs/micro.md). Valgrind cannot run AVX-512
# code, so callgrind instruction counts (scripts/kernel_cost.py) need this too.
export NUMBA_CPU_NAME=znver3
export NUMBA_CPU_FEATURES=+64bit,+adx,+aes,+avx,+avx2,+bmi,+bmi2,+clflushopt,+clwb,+clzero,+cmov,+crc32,+cx16,+cx8,+f16c,+fma,+fsgsbase,+fxsr,+invpcid,+lzcnt,+mmx,+movbe,+mwaitx,+pclmul,+pku,+popcnt,+prfchw,+rdpid,+rdpru,+rdrnd,+rdseed,+sahf,+sha,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+sse4a,+ssse3,+vaes,+vpclmulqdq,+wbnoinvd,+xsave,+xsavec,+xsaveopt,+xsaves,-avx512f
