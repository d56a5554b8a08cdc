#!/usr/bin/env bash
# Runs a command (the test suite) where meshnft cannot execute nft: in a
# private mount namespace, every nft binary on the usual paths is covered by
# a program that records its call and fails. The tests keep nft as their
# oracle under another path ($MESHNFT_TEST_NFT, which crates/testkit uses for
# every `nft` they run). Fails when anything ran the covered nft, and when
# the command left test network namespaces behind (they live in this mount
# namespace's /run/netns, invisible outside it).
#
#   sudo scripts/without-nft.sh cargo test --tests
set -euo pipefail
if [[ "${MESHNFT_NFT_HIDDEN:-}" != 1 ]]; then
  exec unshare --mount --propagation private env MESHNFT_NFT_HIDDEN=1 "$0" "$@"
fi
real=$(command -v nft || true)
if [[ -z "$real" ]]; then
  echo "without-nft.sh: the tests need nft as their oracle (apt-get install nftables)" >&2
  exit 1
fi
dir=$(mktemp -d /tmp/meshnft-oracle.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$real" "$dir/nft"
calls="$dir/calls"
: >"$calls"
cat >"$dir/fail" <<SCRIPT
#!/bin/sh
echo "nft \$*" >>"$calls"
echo "nft is hidden in this test run: meshnft must not need it" >&2
exit 127
SCRIPT
chmod 0755 "$dir/fail"
for p in /usr/sbin/nft /usr/bin/nft /usr/local/sbin/nft /usr/local/bin/nft; do
  if [[ -e "$p" ]]; then mount --bind "$dir/fail" "$p"; fi
done
if nft --version >/dev/null 2>&1; then
  echo "without-nft.sh: nft still runs" >&2
  exit 1
fi
: >"$calls"
echo "==> nft hidden from meshnft (oracle: $dir/nft)"
status=0
MESHNFT_TEST_NFT="$dir/nft" "$@" || status=$?
if [[ -s "$calls" ]]; then
  echo "without-nft.sh: something executed nft while it was hidden:" >&2
  cat "$calls" >&2
  status=1
fi
if ip netns list | grep -E '^mt'; then
  echo "without-nft.sh: leftover network namespaces (above)" >&2
  status=1
fi
exit "$status"
