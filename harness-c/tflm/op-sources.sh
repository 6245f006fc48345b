#!/bin/sh
# op-sources.sh TREE KERNELS OP... — the TFLM sources (paths under TREE, one
# per line, sorted) a runner registering only the operators OP... links:
# TFLM's runtime (everything outside the kernel folders but TFLM's test
# scaffolding), and per operator the file that defines its registration
# (MicroMutableOpResolver's Add<OP> default, e.g. Register_CONV_2D for
# Conv2D; under KERNELS=cmsis_nn the CMSIS-NN glue's file when it has one)
# with its <stem>_*.cc and the kernel helpers whose headers they include. The signal library's sources come only with a
# signal operator. A helper this misses is a link error naming the symbol,
# never a runner that silently lacks code.
#
# op-sources.sh --names TREE NAME... — the Add* names (without `Add`, one per
# line, sorted) of operators named as a model names them: a builtin
# (`CONV_2D`), a custom code (`SignalEnergy`), or an Add* name already.
# TinySeg's `MEMTRACE_*` operators are the runner's own, always registered.
set -eu
names=
if [ "$1" = --names ]; then
    names=yes
    shift
    tree=$1
    shift
else
    tree=$1 kernels=$2
    shift 2
fi
cd "$tree"
k=tensorflow/lite/micro/kernels
resolver=tensorflow/lite/micro/micro_mutable_op_resolver.h

if [ -n "$names" ]; then
    # Each Add<Op> of the resolver with the builtin or custom code it adds.
    table=$(awk '
        match($0, /TfLiteStatus Add[A-Za-z0-9]+\(/) {
            op = substr($0, RSTART + 16, RLENGTH - 17); done = 0
            if (op == "Builtin" || op == "Custom") op = ""
        }
        op != "" && !done && match($0, /BuiltinOperator_[A-Z0-9_]+/) {
            print substr($0, RSTART + 16, RLENGTH - 16), op; done = 1
        }
        op != "" && !done && match($0, /AddCustom\("[^"]+"/) {
            print substr($0, RSTART + 11, RLENGTH - 12), op; done = 1
        }' "$resolver")
    ops=
    for name in "$@"; do
        case $name in MEMTRACE_*) continue ;; esac
        op=$(printf '%s\n' "$table" | awk -v n="$name" '$1 == n || $2 == n { print $2; exit }')
        if [ -z "$op" ] && grep -q "TfLiteStatus Add$name(" "$resolver"; then
            op=$name
        fi
        if [ -z "$op" ]; then
            echo "op-sources.sh: TFLM's op resolver ($resolver) has no operator $name" >&2
            exit 1
        fi
        ops="$ops$op
"
    done
    printf '%s' "$ops" | LC_ALL=C sort -u
    exit 0
fi
# FILE... and the kernel helpers they need, to a fixed point: for each
# `#include "tensorflow/lite/micro/kernels/<h>.h"` of theirs or of the
# headers they include, the <h>_*.cc beside it,
# and <h>.cc unless it registers an operator of its own (conv.h is included
# by depthwise_conv.cc for conv_common.cc's functions, not for CONV_2D).
with_helpers() {
    todo=
    for f in "$@"; do [ -f "$f" ] && todo="$todo $f"; done
    seen=
    while [ -n "$todo" ]; do
        next=
        for f in $todo; do
            case " $seen " in *" $f "*) continue ;; esac
            seen="$seen $f"
            case $f in *.cc) echo "$f" ;; esac
            for h in $(sed -n 's|^#include "tensorflow/lite/micro/kernels/\([a-z0-9_]*\)\.h".*|\1|p' "$f"); do
                # Headers include headers (depthwise_conv.h includes conv.h).
                [ -f "$k/$h.h" ] && next="$next $k/$h.h"
                for c in "$k/$h.cc" "$k/${h}"_*.cc; do
                    [ -f "$c" ] || continue
                    case $c in
                    */kernel_runner.cc) continue ;;
                    "$k/$h.cc") grep -q 'Register_[A-Za-z0-9_]*() *{' "$c" && continue ;;
                    esac
                    next="$next $c"
                done
            done
        done
        todo=$next
    done
}

sources() {
    # The runtime: everything outside the kernel folders and the signal
    # library, without the Cortex-M platform files (the runner has its own)
    # and TFLM's test scaffolding, which no runner links.
    find tensorflow -name '*.cc' ! -path "$k/*" ! -path 'tensorflow/lite/micro/cortex_m_generic/*' \
        ! -name 'test_helper*.cc' ! -name mock_micro_graph.cc ! -name fake_micro_context.cc
    # The kernels' one helper of all: kernel_util.cc. The others come with
    # the operators whose sources include their headers (below).
    echo "$k/kernel_util.cc"
    signal=
    for op in "$@"; do
        reg=$(sed -n "/TfLiteStatus Add$op(/,/^  }/p" "$resolver" |
            grep -o 'Register_[A-Za-z0-9_]*()' | head -n 1 | tr -d '()')
        if [ -z "$reg" ]; then
            echo "op-sources.sh: $resolver has no Add$op with a registration" >&2
            exit 1
        fi
        defs=$(grep -l "$reg() *{" "$k"/*.cc "$k"/cmsis_nn/*.cc signal/micro/kernels/*.cc 2>/dev/null || true)
        file=
        if [ "$kernels" = cmsis_nn ]; then
            file=$(printf '%s\n' $defs | grep '/cmsis_nn/' | head -n 1 || true)
        fi
        [ -n "$file" ] || file=$(printf '%s\n' $defs | grep -v '/cmsis_nn/' | head -n 1 || true)
        if [ -z "$file" ]; then
            echo "op-sources.sh: no source of $tree defines $reg() (for Add$op)" >&2
            exit 1
        fi
        stem=$(basename "$file" .cc)
        dir=$(dirname "$file")
        [ "$dir" = "$k/cmsis_nn" ] && dir=$k
        # The operator's file, its <stem>_*.cc (conv_common.cc), and what
        # the kernel headers they include are implemented in.
        with_helpers "$file" "$dir/${stem}"_*.cc
        case $file in signal/*) signal=yes ;; esac
    done
    if [ -n "$signal" ]; then
        find signal -name '*.cc' ! -path 'signal/micro/kernels/*'
    fi
}
# Not a pipeline into sort: an unknown operator must fail the script.
list=$(sources "$@")
printf '%s\n' "$list" | LC_ALL=C sort -u
