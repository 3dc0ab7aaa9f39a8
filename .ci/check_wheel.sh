#!/usr/bin/env bash
# The package as users get it (issue 25): build the wheel, install it in fresh virtual environments
# (the core alone, then [all]) and use it from an empty folder, never from the checkout:
#   core: fit / transform / retrieval / evaluation run and torch, Streamlit, open_clip are absent;
#         `slics app` says in one line which extra it needs;
#   all:  `slics emoji-build` (SLICS_EMOJI_SCALE=0.1) finds the shipped encoders and sprites; the
#         explorer's home page runs from the installed package (Streamlit's AppTest) on that world;
#         `slics app` serves (/_stcore/health, /) and is stopped.
# Called by .ci/run after README's test command; run it alone with `bash .ci/check_wheel.sh`.
# Each install's wall time is printed (the [all] install downloads PyTorch, several GB).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PORT=${SLICS_WHEEL_PORT:-8765}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/slics-wheel.XXXXXX")
APP_PID=""
cleanup() {
  if [ -n "$APP_PID" ]; then kill -- -"$APP_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/empty" "$WORK/dist"
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
unset PYTHONPATH VIRTUAL_ENV
step() { echo "== check_wheel: $*"; }
timed() { local t0=$SECONDS; "$@"; echo "   ($(( SECONDS - t0 )) s)"; }

step "build the wheel"
python3 -m venv "$WORK/core"
timed "$WORK/core/bin/pip" wheel -q --no-deps -w "$WORK/dist" "$ROOT"
WHEEL=$(ls "$WORK"/dist/slics_explorer-*.whl)
echo "   $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

step "core install (no extra)"
timed "$WORK/core/bin/pip" install -q "$WHEEL"
cd "$WORK/empty"
"$WORK/core/bin/python" - <<'EOF'
import importlib.util, sys
import numpy as np
from slics_core import SLiCS
from slics_core.metrics import RetrievalScorer, evaluate_rankings
from slics_core.retrieval import build_index
from slics_core.synthetic import make_concept_cones
from slics_core.weights import ASSETS_DIR

for name in ("torch", "open_clip", "streamlit", "transformers", "diffusers", "faiss"):
    assert importlib.util.find_spec(name) is None, f"{name} is installed with the core"
assert "site-packages" in str(ASSETS_DIR) and (ASSETS_DIR / "emoji" / "preview_table.npz").is_file(), ASSETS_DIR
data = make_concept_cones(n_samples=400, n_features=16, n_concepts=3, n_atoms=2, random_state=0)
model = SLiCS(n_atoms=2, n_iter=5).fit(data.X[:300], data.Y[:300])
V = model.project(data.X[300:], None)
idx = build_index(data.X[:300]).search(V.reshape(-1, 16), 20)[0].reshape(100, 3, 20)
general = evaluate_rankings(idx, data.Y[300:], data.Y[:300], k=20)["general"]
print(f"   core fit: atoms {model.atoms_.shape}, mAP@20 {general:.3f}, scorer {RetrievalScorer()(model, data.X[300:], data.Y[300:]):.3f}")
assert general > 0.5
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "open_clip", "streamlit", "transformers"})
assert not loaded, loaded
EOF
"$WORK/core/bin/slics" --version
if "$WORK/core/bin/slics" app > "$WORK/app-core.log" 2>&1; then
  echo "slics app ran without Streamlit installed"; exit 1
fi
grep -q 'pip install "slics-explorer\[app\]"' "$WORK/app-core.log" || { cat "$WORK/app-core.log"; exit 1; }
echo "   $(cat "$WORK/app-core.log")"

step "full install ([all])"
python3 -m venv "$WORK/all"
timed "$WORK/all/bin/pip" install -q "$WHEEL[all]"
# a small emoji world (750 scenes), built once: the app then opens on it and starts no background build
export SLICS_EMOJI_CACHE="$WORK/emoji-cache" SLICS_WORKSPACES="$WORK/workspaces" SLICS_EMOJI_SCALE=0.1
cd "$WORK/empty"
"$WORK/all/bin/slics" models > /dev/null
step "slics emoji-build (small) from the installed assets"
timed "$WORK/all/bin/slics" emoji-build --quiet  # sizes from SLICS_EMOJI_SCALE
step "the explorer's home page from the installed package"
"$WORK/all/bin/python" - <<'EOF'
import importlib.util
from pathlib import Path
from streamlit.testing.v1 import AppTest

spec = importlib.util.find_spec("slics_explorer_app")
app = Path(spec.submodule_search_locations[0]) / "app.py"
assert "site-packages" in str(app), app
at = AppTest.from_file(str(app), default_timeout=240).run()
assert not at.exception, [e.message for e in at.exception]
print(f"   {app}: home page ran ({len(at.markdown)} markdown blocks)")
EOF
step "slics app serves on port $PORT"
setsid "$WORK/all/bin/slics" app --server.headless true --server.port "$PORT" > "$WORK/app.log" 2>&1 &
APP_PID=$!
fetch() { "$WORK/all/bin/python" -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())" "$1" 2>/dev/null; }
for _ in $(seq 1 180); do
  if [ "$(fetch "http://localhost:$PORT/_stcore/health")" = "ok" ]; then break; fi
  if ! kill -0 "$APP_PID" 2>/dev/null; then cat "$WORK/app.log"; echo "slics app exited"; exit 1; fi
  sleep 1
done
[ "$(fetch "http://localhost:$PORT/_stcore/health")" = "ok" ] || { cat "$WORK/app.log"; echo "no health"; exit 1; }
# the page itself (a busy machine can answer the first request after the 5 s fetch timeout: ask up to 5 times)
for _ in 1 2 3 4 5; do PAGE=$(fetch "http://localhost:$PORT/" || true); case "$PAGE" in *"<title>"*) break;; esac; sleep 2; done
case "$PAGE" in *"<title>"*) ;; *) cat "$WORK/app.log"; echo "no page at /"; exit 1;; esac
echo "   health: ok"
kill -- -"$APP_PID"
wait "$APP_PID" 2>/dev/null || true
APP_PID=""
step "done"
