#!/usr/bin/env bash
# First thing the VM runs (in the host root, see tests/vm/init and pid1): make the VM
# kernel's modules reachable, build the Soft-RoCE rails, then run the requested command.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=${TERM:-linux}

# devtmpfs has no /dev/fd (udev makes it on a real system); bash's <(...) needs it.
ln -sfn /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr

# The host root carries the host's modules; the VM kernel's own come from the unpacked .deb, or
# with VM_RDMA=ofed from the copy of that tree with the OFED-view RDMA core (ofed/build.sh).
mkdir -p "/lib/modules/$ROCE_KVER"
mount --bind "$ROCE_MODROOT/lib/modules/$ROCE_KVER" "/lib/modules/$ROCE_KVER"

# shellcheck source=tests/vm/lib.sh
source "$ROCE_REPO/tests/vm/lib.sh"
vm_setup
# From here on a kernel panic is not an early-boot one: run.sh does not boot again.
: >/run/vmshare/started
exec "$@"
