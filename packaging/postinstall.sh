#!/bin/sh
# Creates the system user rdmapipe that the rdmarecv@ service runs as,
# once: an upgrade or a reinstall keeps it (useradd's exit 9: the name is
# in use). Under DPKG_ROOT (dpkg --root --force-script-chrootless) it makes
# the user in that root.
set -e
root=${DPKG_ROOT:-}
useradd ${root:+--prefix "$root"} --system --user-group --no-create-home \
	--home-dir /var/lib/rdmapipe --shell /usr/sbin/nologin --comment "rdmapipe receiver" rdmapipe ||
	[ $? -eq 9 ]
