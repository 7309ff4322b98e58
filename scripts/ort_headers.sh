#!/usr/bin/env bash
# onnxruntime's C/C++ headers, for compiling custom operators (bench/studies/fused_linear.py):
# the PyPI wheel ships none; Debian 13 packages them as libonnxruntime-dev. On Debian 13 or later
# they are installed in /usr/include/onnxruntime already if that package is; on Debian 12 this
# fetches the package from Debian 13 through this machine's own Debian mirror (read from its apt
# sources), with a private apt state: nothing on the system changes, nothing is installed.
#
#   bash scripts/ort_headers.sh DEST      # prints the directory to pass as ORT_INCLUDE
set -euo pipefail
dest=${1:?usage: ort_headers.sh DEST}
suite=${ORT_HEADERS_SUITE:-trixie}

if [ -f /usr/include/onnxruntime/onnxruntime_c_api.h ]; then
  echo /usr/include/onnxruntime
  exit 0
fi
# The first Debian archive this machine's apt uses (deb822 .sources or one-line .list files).
mirror=$(
  { grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null || true
    grep -h '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
  } | awk '{for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; break }}' | grep '/debian/*$' | head -n 1 || true
)
[ -n "$mirror" ] || { echo "ort_headers.sh: no Debian mirror in this machine's apt sources" >&2; exit 1; }

state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$dest"
echo "deb $mirror $suite main" > "$state/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" -qq update
(cd "$state" && apt-get "${apt_opts[@]}" -qq download libonnxruntime-dev)
dpkg-deb -x "$state"/libonnxruntime-dev_*.deb "$state/unpacked"
rm -rf "$dest/onnxruntime"
cp -r "$state/unpacked/usr/include/onnxruntime" "$dest/onnxruntime"
echo "$dest/onnxruntime"
