# Sourced by the read benchmarks. wrk_cpu PID ARGS...: one wrk -t1 -c32 run of $DUR seconds
# pinned to core 1; prints "req/s cpu_us_per_request" where the CPU is the server's (user +
# system, from /proc/PID/stat). CPU per request barely moves when the machine's neighbours do,
# so it is the steadier figure on a shared VM; req/s is what the goal's ratio is defined on.
TICK=$(getconf CLK_TCK)
wrk_cpu() {
  local pid=$1; shift
  local c0 c1 out
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 1 wrk -t1 -c32 -d"${DUR}s" "$@" 2>/dev/null)
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  echo "$out" | awk -v c0="$c0" -v c1="$c1" -v tick="$TICK" \
    '/requests in/ {n=$1} /Requests\/sec/ {rps=$2} END {printf "%s %.1f\n", rps, (c1-c0)*1e6/tick/n}'
}
