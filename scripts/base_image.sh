#!/usr/bin/env bash
# The Debian base image the project's images build FROM, where no image registry is reachable:
#
#   sudo bash scripts/base_image.sh [IMAGE]        # default IMAGE: local/debian:bookworm
#
# debootstrap makes a minimal bookworm root file system; the host's CA certificates go in
# (and PIP_CERT points pip at them), so pip inside the builds trusts what the host trusts (a
# proxy that intercepts TLS included); docker import turns it into IMAGE. Then build with
# `export BASE_IMAGE=IMAGE`. scripts/compose_e2e.sh runs exactly this.
set -euo pipefail
IMAGE=${1:-local/debian:bookworm}
command -v debootstrap >/dev/null || { echo "base_image.sh: debootstrap is missing: apt-get install debootstrap" >&2; exit 2; }
WORK=$(mktemp -d -t nmt-base-image.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
rootfs=$WORK/rootfs
if ! timeout 900 debootstrap --variant=minbase bookworm "$rootfs" >"$WORK/debootstrap.log" 2>&1; then
  tail -20 "$WORK/debootstrap.log" >&2
  echo "base_image.sh: debootstrap failed" >&2
  exit 1
fi
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/usr/local/share/ca-certificates"
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
if [ -d /usr/local/share/ca-certificates ]; then
  cp -r /usr/local/share/ca-certificates/. "$rootfs/usr/local/share/ca-certificates/"
fi
tar -C "$rootfs" -c . | timeout 300 docker import \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' - "$IMAGE" >/dev/null
echo "built $IMAGE"
