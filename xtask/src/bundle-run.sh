#!/usr/bin/env bash
# Hearth bench bundle: runs `hearth bench` on whatever adapter this machine has and writes one
# Markdown file. Made by `cargo xtask bench --bundle <dir>` from @REVISION@.
#
# usage: ./run.sh [--quick] [results.md]
#   results.md  where the results go (default: results-<host>-<UTC time>.md beside this script)
#   --quick     2 layers, a few tokens, a tiny agent step: checks the bundle runs (slow adapters)
# environment:
#   HEARTH_STEP_TIMEOUT=<s>   one time limit (seconds) for every step instead of the defaults:
#                             self-test 60, dispatch probe 60, kernels 90, E2B 120, E4B 150,
#                             agent step 120, speculative E2B 150, E4B 180
#   HEARTH_BUNDLE_SECONDS=<s> the whole run's budget (default 450, so that a lent GPU's 15 minutes
#                             run it twice; 0: none, the default with --quick): each step's limit
#                             is cut to what is left, and a step with under 15 s left is skipped
#                             (it says so). Steps run in the order of what matters most: the
#                             self-test, the dispatch probe, the side-by-side, the kernels, the models.
#   HEARTH_SYSTEM_VULKAN=1    use the system's Vulkan loader instead of lib/libvulkan.so.1
#   HEARTH_GEMM_TILES="64x8x16x16 128x4x16x16 …"   after the kernel step, the prefill product
#                             once more per tile (threads×rows×tokens×depth, 60 s each)
#   HEARTH_SPLIT_KEYS="8 32 64"   after the side-by-side, decode at depth 4,096 on the layout
#                             GGUF once more per fewest-keys-a-split of the decode attention
#   HEARTH_GEMV_ROWS="2 4 8"  after the kernel step, the GEMV tables once more per rows a block
#                             of the decode products' kernel (default "2 4 8"; empty: none)
#   HEARTH_LAYOUT_DIR=<dir>   where the 3.3 GB layout GGUF is written (default: a temporary folder)
# Needs bash, coreutils and a Vulkan driver; no cargo, no network. The side-by-side with llama.cpp
# (first, when llama-bench.xz is here) also needs python3 and 3.3 GB of disk. Each step has its own time
# limit, so one slow step does not lose the rest. Exits 0 when the dispatch probe or the kernel step
# finished.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
quick=0
out=""
for arg in "$@"; do
    case "$arg" in
        --quick) quick=1 ;;
        -h | --help)
            sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*)
            echo "run.sh: unknown option $arg (see --help)" >&2
            exit 2
            ;;
        *) out="$arg" ;;
    esac
done
host="$(uname -n 2>/dev/null || echo host)"
if [ -z "$out" ]; then
    out="$here/results-$host-$(date -u +%Y%m%dT%H%M%SZ).md"
fi
mkdir -p "$(dirname "$out")"
: >"$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The CLI travels compressed (xz; Python's lzma where xz is missing); a bundle unpacked by hand
# (a `hearth` beside this script) is used as it is.
unpack() {
    xz -dc "$1" >"$2" 2>/dev/null ||
        python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$1" >"$2"
}
hearth="$here/hearth"
if [ ! -f "$hearth" ]; then
    hearth="$tmp/hearth"
    if ! unpack "$here/hearth.xz" "$hearth"; then
        echo "run.sh: could not unpack hearth.xz (needs xz or python3)" >&2
        exit 1
    fi
fi
# A copy that lost its modes (an archive, a sync) still runs.
if [ ! -x "$hearth" ]; then chmod +x "$hearth"; fi

# wgpu dlopens libvulkan.so.1 at run time (ldd does not list it): the bundled loader, unless asked.
if [ "${HEARTH_SYSTEM_VULKAN:-0}" = 1 ]; then
    loader="the system's"
else
    export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    loader="bundled (lib/libvulkan.so.1)"
fi

# The Vulkan drivers (ICDs) the loader will find. An NVIDIA container often has the driver's
# libGLX_nvidia.so.0 but no nvidia_icd.json: then one is written that names it.
icd_dirs=(/etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d)
icds=""
for dir in "${icd_dirs[@]}"; do
    for file in "$dir"/*.json; do
        if [ -e "$file" ]; then icds+="$file "; fi
    done
done
ld_cache="$( (ldconfig -p || /sbin/ldconfig -p) 2>/dev/null || true)"
icd_note=""
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [[ "$icds" != *nvidia* ]] &&
    [[ "$ld_cache" == *"libGLX_nvidia.so.0 "* ]]; then
    printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "libGLX_nvidia.so.0", "api_version": "1.3.0"}}\n' \
        >"$tmp/nvidia_icd.json"
    export VK_DRIVER_FILES="$tmp/nvidia_icd.json" VK_ICD_FILENAMES="$tmp/nvidia_icd.json"
    icd_note=" (no nvidia_icd.json installed: one naming libGLX_nvidia.so.0 was written)"
fi

if [ "$quick" = 1 ]; then
    budget="${HEARTH_BUNDLE_SECONDS:-0}"
    dispatch_flags=(--dispatch --dispatch-launches 200 --dispatch-gemvs 10)
    model_flags=(--layers 2 --prefill 4 --decode 2 --gemm-tokens 0)
    kernel_flags=(--gemm-tokens 64)
    agent_flags=(--agent 16 8 2)
    # The drafter reads a full-attention layer: E2B's first is its fifth, E4B's its sixth.
    speculative_flags=(--layers 6 --prefill 4 --decode 2 --gemm-tokens 0 --speculative 2 --speculative-tokens 6)
    vision_flags=(--vision --vision-budgets 70 --vision-runs 1 --layers 2)
    audio_flags=(--audio --audio-seconds 1 --audio-runs 1)
    mode="quick: prefill product of 64 tokens; 2 layers, prefill 4, decode 2; agent step 16 cached + 8 new tokens, 2 decoded (E2B)"
else
    budget="${HEARTH_BUNDLE_SECONDS:-450}"
    dispatch_flags=(--dispatch)
    model_flags=(--prefill 64 --decode 16 --gemm-tokens 0)
    kernel_flags=(--gemm-tokens 1500)
    # Three separate values: clap refuses them comma-separated, whatever `--help` says.
    agent_flags=(--agent 3000 1500 40)
    speculative_flags=(--prefill 16 --decode 4 --gemm-tokens 0 --speculative 2,4,8)
    vision_flags=(--vision --vision-budgets 70,280,1120 --vision-runs 3)
    audio_flags=(--audio --audio-seconds 1,5,30 --audio-runs 3)
    mode="full: prefill product of 1500 tokens; all layers, prefill 64, decode 16; agent step 3000 cached + 1500 new tokens, 40 decoded (E2B)"
fi

say() { echo "run.sh: $*" >&2; }
# What `step` runs: hearth, unless a step names another program (the peer).
program="$hearth"

{
    echo "# Hearth bench bundle — $host, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Hearth @REVISION@; mode $mode."
    echo
    echo "## Machine"
    echo
    echo "- system: $(uname -srmo 2>/dev/null || uname -a)"
    if [ -r /etc/os-release ]; then
        echo "- distribution: $(. /etc/os-release && echo "${PRETTY_NAME:-unknown}")"
    fi
    echo "- CPU: $(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(nproc 2>/dev/null || echo '?') cores"
    echo "- memory: $(awk '/^MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)"
    echo "- $(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc: unknown')"
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi -L 2>/dev/null | sed 's/^/- /' || true
        gpu="$(nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm,power.limit \
            --format=csv,noheader 2>/dev/null || true)"
        if [ -n "$gpu" ]; then
            echo "- NVIDIA driver, memory, max SM clock, power limit: $gpu"
        fi
        if [[ "$ld_cache" == *"libGLX_nvidia.so.0 "* ]]; then
            echo "- NVIDIA Vulkan driver: libGLX_nvidia.so.0 installed"
        else
            echo "- NVIDIA Vulkan driver: **libGLX_nvidia.so.0 not installed** (a container needs NVIDIA_DRIVER_CAPABILITIES with \`graphics\`; now \`${NVIDIA_DRIVER_CAPABILITIES:-unset}\`)"
        fi
    else
        echo "- nvidia-smi: not found"
    fi
    echo "- Vulkan loader: $loader"
    echo "- Vulkan drivers: ${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-${icds:-none found in ${icd_dirs[*]}}}}$icd_note"
} >>"$out"

# Runs one `hearth` step under its own time limit and appends what it prints as it prints it (so
# a run killed from outside keeps what it had): the Markdown of `hearth bench` with its headings a
# level down (its repeated title line and, after the kernel step, the repeated kernel table left
# out), or, for `text`, a fenced block. Then the outcome and stderr's last lines. Never fails: a
# step that fails or times out says so.
steps_total=0
steps_ok=0
kernels_ok=0
bundle_start=$(date +%s)
step() {
    local title="$1" kind="$2" limit="$3"
    shift 3
    limit="${HEARTH_STEP_TIMEOUT:-$limit}"
    steps_total=$((steps_total + 1))
    local name
    name="$(basename "$program")"
    if [ "$budget" -gt 0 ]; then
        local left=$((budget - ($(date +%s) - bundle_start)))
        if [ "$left" -lt 15 ]; then
            say "$title: skipped (${left} s of the bundle's ${budget} s left)"
            printf '\n## %s\n\nSkipped: %s s of the bundle'"'"'s %s s left (`HEARTH_BUNDLE_SECONDS`).\n' \
                "$title" "$left" "$budget" >>"$out"
            return
        fi
        if [ "$left" -lt "$limit" ]; then limit="$left"; fi
    fi
    say "$title: $name $* (time limit ${limit} s)"
    printf '\n## %s\n\n`%s %s` (time limit %s s)\n\n' "$title" "$name" "$*" "$limit" >>"$out"
    local keep_kernels=0 start status
    if [ "$title" = Kernels ] || [ "$title" = "Dispatch probe" ]; then keep_kernels=1; fi
    if [ "$kind" = text ]; then echo '```' >>"$out"; fi
    start=$(date +%s)
    set +e
    timeout --kill-after=10 "$limit" "$program" "$@" 2>"$tmp/stderr" |
        if [ "$kind" = text ]; then cat; else
            awk -v keep_kernels="$keep_kernels" '
                /^# hearth bench/ { next }
                /^## Fused 4-bit/ { skipping = !keep_kernels }
                /^## / && !/^## Fused 4-bit/ { skipping = 0 }
                skipping { next }
                /^#/ { print "#" $0; fflush(); next }
                { print; fflush() }
            '
        fi >>"$out"
    status=${PIPESTATUS[0]}
    set -e
    local seconds=$(($(date +%s) - start)) outcome
    if [ "$kind" = text ]; then echo '```' >>"$out"; fi
    case "$status" in
        0) outcome="ok" ;;
        124 | 137) outcome="**timed out** after ${limit} s" ;;
        *) outcome="**failed** (exit $status)" ;;
    esac
    if [ "$status" = 0 ]; then
        steps_ok=$((steps_ok + 1))
        if [ "$keep_kernels" = 1 ]; then kernels_ok=1; fi
    fi
    say "$title: $outcome, $seconds s"
    {
        echo
        echo "$title: $outcome, $seconds s."
        # Mesa's complaint about XDG_RUNTIME_DIR, once per instance, is noise here.
        grep -v 'XDG_RUNTIME_DIR is invalid' "$tmp/stderr" >"$tmp/stderr.kept" || true
        if [ -s "$tmp/stderr.kept" ]; then
            echo
            echo "stderr (last 30 lines):"
            echo
            echo '```'
            tail -n 30 "$tmp/stderr.kept"
            echo '```'
        fi
    } >>"$out"
}

# One figure from a step's section of the results: the first line after `## <title>` that matches
# `pattern`, and in it the number `sed_expr` extracts ("" when absent).
figure() {
    local title="$1" pattern="$2" sed_expr="$3"
    awk -v title="## $title" -v pattern="$pattern" '
        $0 == title { inside = 1; next }
        inside && /^## / && !/^### / { inside = 0 }
        inside && $0 ~ pattern { print; exit }
    ' "$out" | sed -n "$sed_expr"
}

# Hearth and llama.cpp's llama-bench on the same GGUF (laid out like the published E2B file) and
# the same driver: decode at depth 64 and 4,096, prefill of 4,096 tokens, and their ratio; Hearth's
# per-kernel profile and llama.cpp's per-operation timings (GGML_VK_PERF_LOGGER) beside them.
side_by_side() {
    local heading="Hearth beside llama.cpp (same GGUF, same driver)"
    if [ ! -f "$here/llama-bench.xz" ]; then
        printf '\n## %s\n\nSkipped: this bundle has no llama-bench (`cargo xtask llama-bench`, then make the bundle again).\n' \
            "$heading" >>"$out"
        return
    fi
    if ! command -v python3 >/dev/null 2>&1; then
        printf '\n## %s\n\nSkipped: no python3 here to write the layout GGUF.\n' "$heading" >>"$out"
        return
    fi
    local peer="$tmp/llama-bench"
    if ! unpack "$here/llama-bench.xz" "$peer"; then
        printf '\n## %s\n\nSkipped: llama-bench.xz could not be decompressed.\n' "$heading" >>"$out"
        return
    fi
    chmod +x "$peer"
    local layout_dir="${HEARTH_LAYOUT_DIR:-$tmp}" layers=() short=64 long=4096 tokens=32 runs=3
    if [ "$quick" = 1 ]; then
        layers=(--layers 5)
        short=8 long=32 tokens=4 runs=1
        # ggml skips Vulkan devices of the CPU type (lavapipe) unless named.
        export GGML_VK_VISIBLE_DEVICES="${GGML_VK_VISIBLE_DEVICES:-0}"
    fi
    mkdir -p "$layout_dir"
    layout="$layout_dir/gemma4-e2b-layout.gguf"
    say "writing $layout (gguf_layout.py e2b ${layers[*]})"
    {
        printf '\n## %s\n\n' "$heading"
        if HEARTH_GGUF_FIXTURE="$here/gemma4-fixture.gguf" python3 "$here/gguf_layout.py" e2b "$layout" "${layers[@]}" 2>&1; then
            echo
        else
            echo
            echo "Writing the layout GGUF **failed**: the side-by-side did not run."
            layout=""
        fi
    } >>"$out"
    if [ -z "$layout" ]; then return; fi
    local model=(--model "$layout" --gemm-tokens 0 --profile)
    step "Hearth, depth $short" md 180 bench "${model[@]}" --prefill "$short" --decode "$tokens"
    step "Hearth, depth $long" md 240 bench "${model[@]}" --prefill "$long" --decode "$tokens"
    program="$peer" step "llama.cpp" text 300 -m "$layout" -ngl 99 -fa 1 -p "$long" -n "$tokens" \
        -d "$short,$long" -r "$runs"
    GGML_VK_PERF_LOGGER=1 program="$peer" step "llama.cpp per operation, depth $long" text 120 -m "$layout" \
        -ngl 99 -fa 1 -p 0 -n 8 -d "$long" -r 1

    local tokens_per_s='s/.*= \([0-9.]*\) tokens\/s.*/\1/p'
    # Hearth's decode as `generate` runs it: each step submitted before its token is read back.
    local decode_row='^\| decode .*submitted before'
    local llama_mean='s/.*| *\([0-9.][0-9.]*\) ± [0-9.]* *|.*/\1/p'
    local rows=(
        "decode at depth $short|$(figure "Hearth, depth $short" "$decode_row" "$tokens_per_s")|$(figure llama.cpp "tg$tokens @ d$short" "$llama_mean")"
        "decode at depth $long|$(figure "Hearth, depth $long" "$decode_row" "$tokens_per_s")|$(figure llama.cpp "tg$tokens @ d$long" "$llama_mean")"
        "prefill of $long tokens|$(figure "Hearth, depth $long" '^\| prefill ' "$tokens_per_s")|$(figure llama.cpp "pp$long @ d$short" "$llama_mean")"
    )
    {
        printf '\n## Hearth ÷ llama.cpp\n\n'
        echo "Tokens/s on the same file and driver (llama.cpp's prefill at depth $short)."
        echo
        echo "| figure | Hearth tokens/s | llama.cpp tokens/s | Hearth ÷ llama.cpp |"
        echo "|---|---|---|---|"
        for row in "${rows[@]}"; do
            IFS='|' read -r what ours theirs <<<"$row"
            ratio="$(awk -v a="$ours" -v b="$theirs" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else print "?" }')"
            echo "| $what | ${ours:-?} | ${theirs:-?} | $ratio |"
        done
    } >>"$out"
    for keys in ${HEARTH_SPLIT_KEYS:-}; do
        step "Split keys $keys, depth $long" md 180 bench "${model[@]}" --prefill "$long" --decode "$tokens" \
            --split-keys "$keys"
    done
    rm -f "$layout"
}

step "Self-test" text 60 self-test
# What one launch costs (issue 58): before anything else that launches.
step "Dispatch probe" md 60 bench "${dispatch_flags[@]}"
side_by_side
step "Kernels" md 90 bench --kernels-only "${kernel_flags[@]}"
step "E2B model" md 120 bench --shape e2b "${model_flags[@]}"
step "E4B model" md 150 bench --shape e4b "${model_flags[@]}"
step "E2B agent step" md 120 bench --shape e2b "${model_flags[@]}" "${agent_flags[@]}"
step "E2B speculative decoding" md 150 bench --shape e2b "${speculative_flags[@]}"
step "E4B speculative decoding" md 180 bench --shape e4b "${speculative_flags[@]}"
for rows in ${HEARTH_GEMV_ROWS-2 4 8}; do
    step "Kernels, GEMV $rows rows a block" md 90 bench --kernels-only --gemm-tokens 0 --gemv-rows "$rows"
done
for tile in ${HEARTH_GEMM_TILES:-}; do
    step "GEMM tile $tile" md 60 bench --kernels-only "${kernel_flags[@]}" --gemm-shapes q,kv,gate-up,down --gemm-tile "$tile"
done
# The tower per image: E2B's projector is 16-bit (f32 on the device), E4B's Q8_0 (kept packed).
step "E2B vision tower" md 240 bench --shape e2b "${vision_flags[@]}"
step "E4B vision tower, packed" md 240 bench --shape e4b "${vision_flags[@]}" --vision-packed
step "E2B audio tower" md 180 bench --shape e2b "${audio_flags[@]}"

say "$steps_ok of $steps_total steps ok; results in $out"
echo
cat "$out"
# A whole kernel table (only the kernel step writes one; its first row is checked), or the probe's.
if [ "$kernels_ok" = 1 ] && grep -q -e '^| E2B q_proj' -e '^| (a) empty kernel' "$out"; then
    exit 0
fi
say "neither the dispatch probe nor the kernel step finished: see their stderr in $out"
exit 1
