#!/usr/bin/env bash
# A one-node SLURM cluster on localhost (Debian 12, SLURM 22.05) with accounting and 2 fake GPUs,
# for the tests and for trying profiles/slurm. Run as root; safe to re-run.
#   bash scripts/local_slurm.sh start    # installs packages when missing, starts the daemons, waits for the node
#   bash scripts/local_slurm.sh stop
# Partition "debug", no account; fake GPUs are empty files, so `--gpus=1` schedules but no device exists.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
HOST=$(hostname -s)

stop() {
  for pidfile in /run/slurmctld.pid /run/slurmd.pid /run/slurmdbd.pid; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  service mariadb stop >/dev/null 2>&1 || true
}

start() {
  if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mysql >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm slurm-client munge slurmdbd mariadb-server >/dev/null
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 400 /etc/munge/munge.key
  pgrep -x munged >/dev/null || runuser -u munge -- /usr/sbin/munged
  service mariadb start >/dev/null
  mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/slurm
  chown slurm:slurm /var/spool/slurmctld /var/log/slurm
  cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 600 /etc/slurm/slurmdbd.conf
  pgrep -x slurmdbd >/dev/null || /usr/sbin/slurmdbd
  for _ in $(seq 30); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
  touch /dev/fakegpu0 /dev/fakegpu1   # slurmd only needs the files to exist
  echo "NodeName=$HOST Name=gpu File=/dev/fakegpu[0-1]" > /etc/slurm/gres.conf
  cat > /etc/slurm/slurm.conf <<CONF
ClusterName=localcluster
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
MpiDefault=none
GresTypes=gpu
KillWait=10
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$(( $(free -m | awk '/Mem:/ {print $2}') * 3 / 4 )) Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
  sacctmgr -i add cluster localcluster >/dev/null 2>&1 || true
  pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
  pgrep -x slurmd >/dev/null || /usr/sbin/slurmd
  for _ in $(seq 60); do
    state=$(sinfo -h -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    [ "$state" = "down" ] || [ "$state" = "down*" ] && scontrol update nodename="$HOST" state=resume 2>/dev/null || true
    sleep 1
  done
  sinfo -o '%P %N %G %t'
  [ "$(sinfo -h -o %t)" = idle ] || { echo "local SLURM did not come up; see /var/log/slurm/" >&2; exit 1; }
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
