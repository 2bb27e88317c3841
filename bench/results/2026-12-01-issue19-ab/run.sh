#!/usr/bin/env bash
# Issue 19: fresh intake (closed loop) before (fbcdcec, before issue 19) vs after (main), alternating, same machine.
set -u
cd /work/main
NEW=/work/main/bin/stampede
OLD=/work/notes/stampede-old
run() { # label bin db vhost redisdb round
  STAMPEDE_MODE=development STAMPEDE_MYSQL_DSN="root@tcp(127.0.0.1:3306)/$3?parseTime=true" \
  STAMPEDE_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/$4 STAMPEDE_REDIS_DB=$5 \
  "$2" bench --scenarios soldout,replay --no-baseline --closed-duration 5s --out /work/notes/ab/$1-$6 > /work/notes/ab/$1-$6.log 2>&1
  echo "$1 round $6 rc=$? $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
}
for r in 1 2 3; do
  run old $OLD stampede_bench_old stampede_bench_old 7 $r
  run new $NEW stampede_bench stampede_bench 6 $r
done
