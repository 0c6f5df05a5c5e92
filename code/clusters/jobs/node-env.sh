# Sourced by every task of a job script, on the task's own node: which network interface
# NCCL and gloo use there, and a line saying what Slurm gave the task.
#
# The interface of this node's route to another node of the job: the network the nodes
# share. Left to themselves, gloo binds the address the host name resolves to (127.0.1.1
# on many machines) and NCCL the first interface it likes, which may not reach the other
# nodes. The route goes to another node because a node's own name may resolve to a
# loopback address on that node; a one-node job has no other, and gets the loopback.
NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
PEER=$(grep -vxF "$SLURMD_NODENAME" <<< "$NODES" | head -n 1)
PEER_ADDR=$(getent ahostsv4 "${PEER:-localhost}" | head -n 1 | cut -d" " -f1)
IFACE=$(ip -o -4 route get "$PEER_ADDR" | grep -o "dev [^ ]*" | cut -d" " -f2)
export GLOO_SOCKET_IFNAME=$IFACE NCCL_SOCKET_IFNAME=$IFACE
echo "$(hostname) task $SLURM_PROCID: interface $IFACE," \
    "SLURM_GPUS_ON_NODE=${SLURM_GPUS_ON_NODE:-unset}" \
    "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"
