#!/usr/bin/env bash
# Turn a debootstrapped rootfs into a container image that boots systemd as PID 1.
set -euo pipefail
root=$1
# Units that make no sense in a container, or that wait for hardware.
for unit in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
            systemd-modules-load.service sys-kernel-config.mount sys-kernel-debug.mount \
            getty.target console-getty.service systemd-timesyncd.service \
            apt-daily.timer apt-daily-upgrade.timer; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
# /tmp is not emptied at boot (Debian's tmp.conf says D, remove at boot): Molecule's docker connection runs
# its first task as soon as the container starts, and systemd-tmpfiles removed the module payload it had just
# written there ("No such file or directory: /tmp/ansible_..._payload.zip", a CI run of nvidia_driver). An
# image's /tmp starts empty anyway.
mkdir -p "$root/etc/tmpfiles.d"
echo 'd /tmp 1777 root root -' > "$root/etc/tmpfiles.d/tmp.conf"
# sshd: keys only, root login by key (the lab's management access).
mkdir -p "$root/root/.ssh" "$root/etc/ssh/sshd_config.d"
chmod 700 "$root/root/.ssh"
cat > "$root/etc/ssh/sshd_config.d/lab.conf" <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
CONF
# Host keys are generated per container at first boot, not baked into the image.
rm -f "$root"/etc/ssh/ssh_host_*
mkdir -p "$root/etc/systemd/system/ssh.service.d"
cat > "$root/etc/systemd/system/ssh.service.d/hostkeys.conf" <<'CONF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
CONF
ln -sf /lib/systemd/system/ssh.service "$root/etc/systemd/system/multi-user.target.wants/ssh.service"
echo "gpulab-node" > "$root/etc/hostname"
# apt inside the lab nodes reaches Debian directly.
echo "deb http://deb.debian.org/debian bookworm main" > "$root/etc/apt/sources.list"
echo "deb http://deb.debian.org/debian-security bookworm-security main" >> "$root/etc/apt/sources.list"
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
