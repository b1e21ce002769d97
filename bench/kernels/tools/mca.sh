#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Cycles per vector of each activation body: llvm-mca on the compiled loop
# of tools/mca.c (one vector per iteration). Usage: tools/mca.sh [mcpu]
# (default cascadelake). Needs llvm-mca (Debian: llvm).
cd "$(dirname "$0")/.." || exit 1
CPU=${1:-cascadelake}
S=/tmp/mca_$$.s
L=/tmp/mca_$$.loop.s
for isa in avx2 avx512; do
    case $isa in
    avx2) F="-mavx2 -mfma -mf16c" ;;
    avx512) F="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c" ;;
    esac
    for act in SILU_AND_MUL GELU_AND_MUL GELU_TANH_AND_MUL; do
        for dt in F32 F16 BF16; do
            gcc -std=c11 -D_GNU_SOURCE -O2 -I../../plugins/cpu -I../../include -I. $F \
                -DAP_LAYER="\"simd_$isa.h\"" -DMCA_ACT=FLD_CPU_ACT_$act -DMCA_DT=FLD_CPU_$dt \
                -fno-asynchronous-unwind-tables -S tools/mca.c -o $S || exit 1
            # the loop: from the label a backward jump targets to that jump
            awk '/^\.L[0-9]+:/ { lab = substr($1, 1, length($1) - 1); start[lab] = NR }
                 { line[NR] = $0 }
                 /^\tj[a-z]+\t\.L[0-9]+/ { if ($2 in start) { s = start[$2]; e = NR } }
                 END { for (i = s + 1; i <= e; i++) print line[i] }' $S > $L
            r=$(llvm-mca -mcpu="$CPU" -iterations=300 $L 2>/dev/null |
                awk '/Total Cycles/{c=$3} /Total uOps/{u=$3} /Block RThroughput/{b=$3}
                     END{printf "%6.1f cyc/vec (ports alone %5.1f) %5.1f uops/vec", c/300, b, u/300}')
            printf '%-7s %-18s %-5s %s\n' "$isa" "$act" "$dt" "$r"
        done
    done
done
rm -f $S $L
