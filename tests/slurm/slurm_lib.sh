# A private single-node Slurm cluster for the tests. Source it after tests/lib.sh:
#     . "$(dirname "$0")/../lib.sh"; . "$(dirname "$0")/slurm_lib.sh"
# slm_slurm_start starts, under $W/slurm (the test's temporary directory):
#   munged     with its own key (1 KiB from /dev/urandom), socket, pid, seed and log files;
#   slurmctld  -D, and slurmd -D (node "slm1", every CPU of this machine, loopback only), both on
#              free TCP ports of 127.0.0.1 chosen at start, with their own state / spool
#              directories and logs, proctrack/linuxproc + task/none (no cgroups, no systemd),
#              credentials that expire after 10 s and a scheduler pass every 2 s (a requeued job
#              starts again within ~15 s);
# exports SLURM_CONF so that srun / sbatch / scontrol / squeue of this shell talk to it, and
# waits (bounded) until the node is idle. Stopping is registered with slm_on_exit: every job is
# cancelled, the daemons get SIGTERM by pid (SIGKILL after 10 s), then any process that is left
# of this cluster (slurmstepd, job tasks: found by the tag in their environment / SLURM_CONF) is
# killed; nothing outlives the test.
# Helpers: slm_slurm_wait_job JOBID STATE SECONDS (polls scontrol until the job is in STATE or
# gone past it; 0 when it got there), slm_slurm_job_field JOBID FIELD (one field of `scontrol
# show job`), slm_slurm_logs (prints the daemon logs' tails, for failures).
# Needs root (slurmd starts job steps as their user; as another user the test exits 77, skipped)
# and Debian's slurm-wlm + munge (scripts/setup_test.sh; missing: an error); the
# MPI plugin for Open MPI is PMIx (srun --mpi=pmix; Debian's Open MPI has no PMI-2 client).

SLM_SLURM_DIR=""
SLM_SLURM_PIDS=()

# A free TCP port on 127.0.0.1 (bound, read and closed: another process could take it before
# the daemon binds it, which the start-up check then reports).
slm_slurm_free_port_() {
    "$PY" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

slm_slurm_logs() {
    local f
    for f in "$SLM_SLURM_DIR"/log/*.log; do
        [ -f "$f" ] || continue
        echo "--- $f (tail)"
        tail -n 20 "$f"
    done
}

# Processes of this cluster that survived their daemons: anything whose environment carries the
# tag the daemons were started with, a slurmstepd with this cluster's SLURM_CONF (slurmd hands
# it that, not the tag), or a process with this SLURM_CONF and a SLURM_JOB_ID (job tasks and
# batch scripts; this shell has no SLURM_JOB_ID).
slm_slurm_leftovers_() {
    local p env comm conf="SLURM_CONF=$SLM_SLURM_DIR/slurm.conf"
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        [ "$p" = "$$" ] && continue
        env=$(tr '\0' '\n' 2> /dev/null < "/proc/$p/environ") || continue
        comm=$(cat 2> /dev/null < "/proc/$p/comm") || continue
        if grep -qx "SLM_SLURM_TAG=$SLM_SLURM_DIR" <<< "$env" ||
            { grep -qx "$conf" <<< "$env" &&
                { [ "$comm" = slurmstepd ] || grep -q '^SLURM_JOB_ID=' <<< "$env"; }; }; then
            echo "$p"
        fi
    done
}

slm_slurm_stop() {
    [ -n "$SLM_SLURM_DIR" ] || return 0
    local p i left
    scancel --quiet --full -u "$(id -un)" 2> /dev/null || true
    for i in $(seq 1 50); do # up to 10 s for the cancelled jobs to end
        [ -z "$(squeue -h -o %i 2> /dev/null)" ] && break
        sleep 0.2
    done
    # slurmd first (it ends its steps), then the controller, then munge
    for i in 2 1 0; do
        p=${SLM_SLURM_PIDS[$i]:-}
        [ -n "$p" ] || continue
        kill -TERM "$p" 2> /dev/null || continue
        for _ in $(seq 1 50); do
            kill -0 "$p" 2> /dev/null || break
            sleep 0.2
        done
        kill -KILL "$p" 2> /dev/null || true
        wait "$p" 2> /dev/null || true
    done
    left=$(slm_slurm_leftovers_)
    if [ -n "$left" ]; then
        echo "slurm: killing leftover processes: $(echo $left)" >&2
        kill -KILL $left 2> /dev/null || true
    fi
    SLM_SLURM_PIDS=()
    SLM_SLURM_DIR=""
}

slm_slurm_start() {
    local d="$W/slurm" host cpus cport dport i
    if [ "$(id -u)" -ne 0 ]; then
        echo "slurm: the test cluster needs root (slurmd starts job steps as their user):" \
            "skipped" >&2
        exit 77
    fi
    local t
    for t in munged slurmctld slurmd srun sbatch scontrol squeue scancel; do
        command -v "$t" > /dev/null ||
            { echo "slurm: $t not found (slurm-wlm, munge)" >&2; return 1; }
    done
    mkdir -p "$d"/{munge,state,spool,log,run}
    # munged wants its socket's directory and every one above it searchable by all (o+x), and
    # none of them writable by others (the sticky /tmp passes)
    chmod 711 "$W" "$d" "$d/munge"
    SLM_SLURM_DIR="$d"
    slm_on_exit slm_slurm_stop
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$d/munge/munge.key"
    SLM_SLURM_TAG="$d" munged -F --key-file="$d/munge/munge.key" --socket="$d/munge/munge.socket" \
        --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/munged.seed" \
        --log-file="$d/log/munged.log" --num-threads=4 > "$d/log/munged.out" 2>&1 &
    SLM_SLURM_PIDS[0]=$!
    host=$(hostname -s)
    cpus=$(nproc)
    cport=$(slm_slurm_free_port_)
    dport=$(slm_slurm_free_port_)
    while [ "$dport" = "$cport" ]; do dport=$(slm_slurm_free_port_); done
    : > "$d/plugstack.conf"
    cat > "$d/slurm.conf" << EOF
# written by tests/slurm/slurm_lib.sh: a private single-node cluster on loopback
ClusterName=slm
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$cport
SlurmdPort=$dport
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket,cred_expire=10
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
PlugStackConfig=$d/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MpiDefault=none
ReturnToService=2
KillWait=10
MinJobAge=600
NodeName=slm1 NodeAddr=127.0.0.1 NodeHostname=$host CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=slm1 Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$d/slurm.conf"
    # munged must be up before the daemons authenticate
    for i in $(seq 1 50); do
        [ -S "$d/munge/munge.socket" ] && break
        sleep 0.1
    done
    SLM_SLURM_TAG="$d" slurmctld -D -i -f "$SLURM_CONF" > "$d/log/slurmctld.out" 2>&1 &
    SLM_SLURM_PIDS[1]=$!
    SLM_SLURM_TAG="$d" slurmd -D -N slm1 -f "$SLURM_CONF" > "$d/log/slurmd.out" 2>&1 &
    SLM_SLURM_PIDS[2]=$!
    for i in $(seq 1 150); do # up to 30 s (loaded CI) for the node to register idle
        case "$(sinfo -h -n slm1 -o %t 2> /dev/null)" in
        idle*) return 0 ;;
        esac
        for t in 0 1 2; do
            if ! kill -0 "${SLM_SLURM_PIDS[$t]}" 2> /dev/null; then
                echo "slurm: a daemon exited during start-up" >&2
                slm_slurm_logs >&2
                return 1
            fi
        done
        sleep 0.2
    done
    echo "slurm: node slm1 not idle after 30 s" >&2
    slm_slurm_logs >&2
    return 1
}

slm_slurm_job_field() { # slm_slurm_job_field JOBID FIELD
    scontrol -o show job "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

# slm_slurm_wait_job JOBID STATE SECONDS: 0 once the job's JobState is STATE; 1 when it reached
# another final state (FAILED, CANCELLED, TIMEOUT, ...) or the time ran out.
slm_slurm_wait_job() {
    local id=$1 want=$2 n=$(($3 * 5)) st i
    for i in $(seq 1 "$n"); do
        st=$(slm_slurm_job_field "$id" JobState)
        [ "$st" = "$want" ] && return 0
        case "$st" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
            echo "slurm: job $id is $st, expected $want" >&2
            return 1
            ;;
        esac
        sleep 0.2
    done
    echo "slurm: job $id still ${st:-unknown} after $3 s, expected $want" >&2
    return 1
}
