#!/usr/bin/env bash
# The OS sandbox on a CI runner (bubblewrap, --ecdysis-sandbox): install it, probe it, and on a runner that
# restricts unprivileged user namespaces apply the documented remedy, saying what was done.
#
# GitHub's ubuntu-latest (24.04) restricts unprivileged user namespaces through AppArmor
# (kernel.apparmor_restrict_unprivileged_userns=1): bwrap, run by the non-root runner user, fails with
# "setting up uid map: Permission denied". Ubuntu's documented remedies (its 24.04 release notes, "Unprivileged
# user namespace restrictions"): lift the restriction (sysctl kernel.apparmor_restrict_unprivileged_userns=0),
# or give bwrap an AppArmor profile that allows user namespaces (`userns,`). This script tries the profile
# first (it lifts the restriction for bwrap only), then the sysctl, re-probing after each.
#
# Used by action.yml (its "Set up the sandbox" step) and by this repository's workflows. Environment:
#   ECDYSIS_SANDBOX_REQUIRED=1  exit 1 when no sandbox starts in the end (evolve mode; the workflow
#                               opts out with the action's `sandbox:` input), else a notice and exit 0
#   SUDO                        the command that runs a step as root (default: sudo, none when root)
#   BWRAP_PROFILE               where the AppArmor profile is written (default /etc/apparmor.d/bwrap)
# Output: one `::notice::` line per remedy applied, `::error::` (or `::notice::`) when none helped.
set -u

if [ -z "${SUDO+x}" ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
fi
PROFILE="${BWRAP_PROFILE:-/etc/apparmor.d/bwrap}"
said=""

probe() {  # bwrap starts a process in new namespaces here; its stderr kept in $said
  said="$(bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid --unshare-ipc true 2>&1)"
}

fail() {
  if [ "${ECDYSIS_SANDBOX_REQUIRED:-0}" = 1 ]; then
    echo "::error::the OS sandbox (bubblewrap) cannot start on this runner: $1"
    exit 1
  fi
  echo "::notice::the OS sandbox (bubblewrap) cannot start on this runner: $1; harness code runs without it"
  exit 0
}

if [ "$(uname -s)" != Linux ]; then
  fail "it needs Linux (this runner: $(uname -s))"
fi
if ! command -v bwrap >/dev/null; then
  if $SUDO apt-get install -y -q bubblewrap >/dev/null 2>&1 \
    || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q bubblewrap >/dev/null 2>&1; }; then
    echo "::notice::installed Debian's bubblewrap (apt-get install bubblewrap) for the OS sandbox"
  fi
  command -v bwrap >/dev/null || fail "bubblewrap is not installed and apt-get install bubblewrap failed"
fi
if probe; then
  echo "sandbox: bubblewrap starts here"
  exit 0
fi
restricted="$(sysctl -n kernel.apparmor_restrict_unprivileged_userns 2>/dev/null || echo '')"
case "$said" in
  *"Permission denied"*|*"Operation not permitted"*|*"No permissions to create new namespace"*) ;;
  *) [ "$restricted" = 1 ] || fail "${said:-bwrap failed}" ;;
esac
bwrap_path="$(command -v bwrap)"
if [ "$restricted" = 1 ] || command -v apparmor_parser >/dev/null; then
  # the AppArmor profile for bwrap (Ubuntu 24.04's documented form)
  if printf '%s\n' 'abi <abi/4.0>,' 'include <tunables/global>' \
      "profile bwrap $bwrap_path flags=(unconfined) {" '  userns,' '  include if exists <local/bwrap>' '}' \
      | $SUDO tee "$PROFILE" >/dev/null 2>&1 \
    && $SUDO apparmor_parser -r "$PROFILE" >/dev/null 2>&1; then
    echo "::notice::this runner restricts unprivileged user namespaces (AppArmor): loaded an AppArmor profile allowing them for $bwrap_path ($PROFILE)"
    if probe; then echo "sandbox: bubblewrap starts here"; exit 0; fi
  fi
fi
if $SUDO sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 >/dev/null 2>&1; then
  echo "::notice::this runner restricts unprivileged user namespaces (AppArmor): set kernel.apparmor_restrict_unprivileged_userns=0 (sudo sysctl)"
  if probe; then echo "sandbox: bubblewrap starts here"; exit 0; fi
fi
if $SUDO sysctl -w kernel.unprivileged_userns_clone=1 >/dev/null 2>&1 && probe; then
  echo "::notice::set kernel.unprivileged_userns_clone=1 (sudo sysctl): user namespaces were off"
  echo "sandbox: bubblewrap starts here"
  exit 0
fi
fail "$(printf '%s' "$said" | tail -n 1); tried: an AppArmor profile for bwrap, sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0; remedy: run where unprivileged user namespaces are allowed"
