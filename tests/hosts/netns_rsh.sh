#!/bin/sh
# netns_rsh.sh HOST COMMAND...: Open MPI's rsh agent (--mca plm_rsh_agent) for "hosts" that are
# network namespaces of this machine. ZF_NETNS_HOSTS maps each host address to its namespace
# ("10.231.7.2=zfB1234 ..."); the command runs in that namespace under a hostname of its own (a
# UTS namespace), as on a separate machine: Open MPI names its shared-memory files after the host.
host=$1
shift
for entry in $ZF_NETNS_HOSTS; do
  if [ "${entry%%=*}" = "$host" ]; then
    ns=${entry#*=}
    exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"
  fi
done
echo "netns_rsh.sh: no namespace for host '$host' in ZF_NETNS_HOSTS ($ZF_NETNS_HOSTS)" >&2
exit 255
