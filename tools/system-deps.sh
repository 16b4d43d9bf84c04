#!/usr/bin/env bash
# System tools deciplane's tests and environments use, installed where this user can:
#   bubblewrap  the `bwrap` sandbox backend (untrusted programs: CodeOpt, code benchmarks)
#   valgrind    the deterministic `instructions` timer of CodeOpt
#   java (17+)  TextWorld-Express (its games run on the JVM)
# As root (or with password-less sudo) on Debian/Ubuntu they are installed; otherwise the
# exact command to run is printed once, and the features that need them are skipped with
# that reason (`deciplane doctor` shows what works).
set -u
missing_pkgs=()
command -v bwrap >/dev/null 2>&1 || missing_pkgs+=(bubblewrap)
command -v valgrind >/dev/null 2>&1 || missing_pkgs+=(valgrind)
command -v java >/dev/null 2>&1 || missing_pkgs+=(openjdk-17-jre-headless)
[ ${#missing_pkgs[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo="none"; fi
fi
if [ "$sudo" != none ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system tools: ${missing_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null 2>&1 || true
  if $sudo apt-get install -y -qq "${missing_pkgs[@]}" >/dev/null 2>&1; then exit 0; fi
  echo "apt-get could not install ${missing_pkgs[*]}" >&2
fi
cat >&2 <<MSG
================================================================================
deciplane: missing system tools: ${missing_pkgs[*]}
  run once (as root):  apt-get install -y ${missing_pkgs[*]}
  until then the tests and features that need them are skipped (see: deciplane doctor)
================================================================================
MSG
exit 0
