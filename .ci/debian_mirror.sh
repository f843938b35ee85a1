# Sourced by docker_setup.sh and swe_setup.sh: debian_mirror SUITE prints the Debian archive URI for
# debootstrap: $MONKEYBARREL_DEBIAN_MIRROR if set, else the first one this system's apt sources use for
# SUITE, else nothing (debootstrap then uses its own default).
debian_mirror() {
  if [ -n "${MONKEYBARREL_DEBIAN_MIRROR:-}" ]; then
    echo "$MONKEYBARREL_DEBIAN_MIRROR"
    return
  fi
  apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
    awk -v suite="$1" '$2 == suite { sub(/\/$/, "", $1); print $1; exit }'
}
