#!/usr/bin/env bash
# One session on a GPU machine: this GPU's kernels into a calibration profile, each op of a 1B step priced from
# it against a torch.profiler trace (validation/profile_vs_trace.py), then issue 6's GPU bar (validation/replay_gpu.py:
# the single-GPU Llama-3.2-1B plan, calibrated for its shapes, replayed in each recompute mode and compared with the
# simulator), with the GPU's clocks and power sampled throughout.
#
#   [FULL=1] bash validation/gpu_session.sh OUTDIR [all|profile|replay]
#
# FULL=1: the full calibration sweep instead of --quick (32 s): 267 s on an H200 with the old per-call timer; with the
# queued one it outgrew 260 s (2026-11-27: stopped at its budget before the optimizer and host-copy tables), so keep the
# default CAL_TIMEOUT of 420. `profile`: calibrate and trace only; `replay`: the replay only (it calibrates the
# scenario's own shapes first, then about 60 s per recompute mode; 256 s in all with its traced step on an H200).
# On a 15-minute device budget: `FULL=1 ... profile` in one call, `... replay` in the next while the machine is warm
# (a warm machine is given back 30 s after a call: send the second at once). On an H100 (2026-11-27) that took
# 373 s (timing check 17 s, full sweep 322 s) and 325 s (replay 315 s), 742 s of device time with the start.
# Writes into OUTDIR: nvidia-smi.csv and torch.txt (what ran), clocks.csv (SM clock, power, temperature every 200 ms),
# timing_check.log (validation/gpu_timing_check.py: calibrate's timer against the kernels' traced time), profile.json
# and calibrate.log (`python -m calibrate --gpu 0 [--quick]`), trace.log (profile_vs_trace), and replay_gpu.md, replay_gpu.json, replay_gpu_profile.json, replay.log, trace_none.rank0.json.gz (one traced step of
# the replay without recompute) and step_trace.log (validation/step_trace.py: that step's kernels by class, and by the
# autograd node or ATen op that launched them, against
# the simulator's price of them). On a device machine that returns few files, tar OUTDIR (the trace apart: it can be
# large). Each step has its own time limit (CHECK_TIMEOUT, CAL_TIMEOUT, TRACE_TIMEOUT, REPLAY_TIMEOUT seconds), so one
# step failing or running long leaves the others' results. Needs python3 with torch (CUDA) and the project's dependencies (simpy
# among them: `pip install -e .` where the machine can reach PyPI, its wheel carried where it cannot).
set -u
out=${1:?usage: [FULL=1] gpu_session.sh OUTDIR [all|profile|replay]}
mode=${2:-all}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit,driver_version \
  --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.version.cuda, \
torch.cuda.get_device_name(0))" > "$out/torch.txt" 2>&1
cat "$out/nvidia-smi.csv" "$out/torch.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv -lms 200 \
  > "$out/clocks.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT

if [ "$mode" != replay ]; then
  start=$(date +%s)
  timeout "${CHECK_TIMEOUT:-90}" python3 validation/gpu_timing_check.py > "$out/timing_check.log" 2>&1
  echo "gpu_timing_check exit $? after $(( $(date +%s) - start )) s"
  cat "$out/timing_check.log"
  flags=()
  [ "${FULL:-0}" = 1 ] || flags=(--quick)
  start=$(date +%s)
  cal_timeout=${CAL_TIMEOUT:-$([ "${FULL:-0}" = 1 ] && echo 420 || echo 120)}
  # --budget-s: calibrate stops measuring 30 s before the limit and writes what it has (timeout only as a backstop)
  timeout "$cal_timeout" python3 -m calibrate --gpu 0 "${flags[@]}" --no-progress --budget-s $((cal_timeout - 30)) \
    --out "$out/profile.json" > "$out/calibrate.log" 2>&1
  echo "calibrate (${flags[*]:-full}) exit $? after $(( $(date +%s) - start )) s"
  tail -n 5 "$out/calibrate.log"
  if [ -f "$out/profile.json" ]; then
    start=$(date +%s)
    timeout "${TRACE_TIMEOUT:-120}" python3 validation/profile_vs_trace.py --profile "$out/profile.json" \
      > "$out/trace.log" 2>&1
    echo "profile_vs_trace exit $? after $(( $(date +%s) - start )) s"
    tail -n 8 "$out/trace.log"
  fi
fi

if [ "$mode" != profile ]; then
  start=$(date +%s)
  timeout "${REPLAY_TIMEOUT:-300}" python3 validation/replay_gpu.py --timeout 120 --trace-mode none --out "$out" \
    > "$out/replay.log" 2>&1
  echo "replay_gpu exit $? after $(( $(date +%s) - start )) s"
  tail -n 12 "$out/replay.log"
  if [ -f "$out/trace_none.rank0.json" ]; then
    timeout 120 python3 validation/step_trace.py "$out/trace_none.rank0.json" \
      --scenario scenarios/replay/gpu/1b-accum.yaml --profile "$out/replay_gpu_profile.json" --by-launcher 30 \
      > "$out/step_trace.log" 2>&1
    echo "step_trace exit $?"
    cat "$out/step_trace.log"
    gzip -f "$out/trace_none.rank0.json"
  fi
fi
