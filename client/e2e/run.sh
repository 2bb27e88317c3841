#!/usr/bin/env bash
# Browser end-to-end test with everything it needs: installs Debian's chromium
# and the client's npm packages if missing, builds and starts `stampede serve`
# (every role) on its own ports, MySQL database, Redis database and RabbitMQ
# vhost, runs client/e2e/flow.mjs against it and stops it again. Screenshots
# land in client/e2e/artifacts/, the server log in client/e2e/artifacts/stampede.log.
#
# Needs Redis, RabbitMQ and MySQL on loopback (`make services`), Go and Node ≥ 20.19.
# Environment (all optional):
#   E2E_HTTP_ADDR   gateway address (127.0.0.1:18480, or the next even port nothing listens on)
#   E2E_PUSH_ADDR   push address    (127.0.0.1:18481, or the next odd port nothing listens on)
#   E2E_LIMITED_ADDR a second gateway (gateway role only) whose per-user bucket
#                   refills one token per 10 s, burst 1, for the 429 step
#                   (127.0.0.1:18580, or the next even port nothing listens on)
#   E2E_REDIS_DB    Redis database, flushed first (9)
#   E2E_NAME        MySQL database and RabbitMQ vhost name (stampede_e2e)
#   E2E_ROLES       roles to run in the one server process (default: every role but
#                   the sweeper, which then runs as a process of its own)
#   E2E_PUSH_CMD    extra command to start next to stampede (e.g. a push built elsewhere)
#   E2E_FLOWS       the scripts to run, in order (default "flow.mjs drops.mjs": the
#                   shop, console and waiting room, then the fair drops of issue 28)
#   E2E_MYSQL_PORT  MySQL port on 127.0.0.1 (3306)
#   E2E_REDIS_ADDR  Redis address (127.0.0.1:6379)
#   E2E_AMQP_PORT   RabbitMQ port on 127.0.0.1 (5672); the vhost E2E_NAME is made
#                   afresh with rabbitmqctl
#   E2E_RABBIT_NODE that broker's node name for rabbitmqctl -n (default: rabbitmqctl's)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
ART=$ROOT/client/e2e/artifacts
# listening PORT: whether something on loopback accepts connections on PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_port FROM: FROM, or the next port up that nothing listens on (the
# machine is shared: another developer's server may hold the default).
free_port() {
	local p=$1
	while listening "$p"; do p=$((p + 2)); done
	echo "$p"
}
if [[ -n ${E2E_HTTP_ADDR:-} ]]; then HTTP_ADDR=$E2E_HTTP_ADDR; else HTTP_ADDR=127.0.0.1:$(free_port 18480); fi
if [[ -n ${E2E_PUSH_ADDR:-} ]]; then PUSH_ADDR=$E2E_PUSH_ADDR; else PUSH_ADDR=127.0.0.1:$(free_port 18481); fi
# The second gateway of the 429 step: one token per 10 s per user (burst 1).
if [[ -n ${E2E_LIMITED_ADDR:-} ]]; then LIMITED_ADDR=$E2E_LIMITED_ADDR; else LIMITED_ADDR=127.0.0.1:$(free_port 18580); fi
REDIS_DB=${E2E_REDIS_DB:-9}
NAME=${E2E_NAME:-stampede_e2e}
MYSQL_PORT=${E2E_MYSQL_PORT:-3306}
REDIS_ADDR=${E2E_REDIS_ADDR:-127.0.0.1:6379}
FLOWS=${E2E_FLOWS:-flow.mjs drops.mjs}
AMQP_PORT=${E2E_AMQP_PORT:-5672}
rmq=(rabbitmqctl -q)
[[ -n ${E2E_RABBIT_NODE:-} ]] && rmq+=(-n "$E2E_RABBIT_NODE")
mkdir -p "$ART"

if [[ ! -x /usr/bin/chromium ]]; then
	echo "e2e: installing chromium"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
fi
if [[ ! -d client/node_modules/playwright-core ]]; then
	echo "e2e: npm install"
	(cd client && npm install --no-audit --no-fund --loglevel=error)
fi

# A clean slate: the database, the vhost and the Redis database are
# emptied, so every run sees only its own sales (and its own dead letters).
for cli in mariadb mysql; do
	if command -v "$cli" >/dev/null 2>&1; then
		"$cli" -h 127.0.0.1 -P "$MYSQL_PORT" -u root -e "DROP DATABASE IF EXISTS \`$NAME\`" || true
		break
	fi
done
if command -v rabbitmqctl >/dev/null 2>&1; then
	"${rmq[@]}" delete_vhost "$NAME" >/dev/null 2>&1 || true
	"${rmq[@]}" add_vhost "$NAME" >/dev/null 2>&1 || true
	"${rmq[@]}" set_permissions -p "$NAME" guest ".*" ".*" ".*" >/dev/null
fi
redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" -n "$REDIS_DB" flushdb >/dev/null

go build -o bin/stampede ./cmd/stampede

# Development mode: the test logs in through the demo login and pays through
# the demo checkout (docs/production.md).
export STAMPEDE_MODE=development
export STAMPEDE_HTTP_ADDR=$HTTP_ADDR
export STAMPEDE_PUSH_ADDR=$PUSH_ADDR
export STAMPEDE_REDIS_DB=$REDIS_DB
export STAMPEDE_REDIS_ADDR=$REDIS_ADDR
export STAMPEDE_MYSQL_DSN="root@tcp(127.0.0.1:$MYSQL_PORT)/$NAME?parseTime=true"
export STAMPEDE_AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/$NAME"
export STAMPEDE_PUSH_URL="ws://$PUSH_ADDR/ws"
export STAMPEDE_URL="http://$HTTP_ADDR"
# The payment callback key, shared with flow.mjs (it signs a late payment's callback).
export STAMPEDE_PAYMENT_SECRET=${STAMPEDE_PAYMENT_SECRET:-stampede-e2e-payment-secret-0123456789}

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# The sweeper (with the waiting room's pacer) runs as a process of its own,
# so that drops.mjs can hold the pacer at a drop's opening (SIGSTOP, then
# SIGCONT: E2E_SWEEPER_PID) and photograph "the line is being shuffled".
args=(serve --migrate --static-dir client/dist --roles "${E2E_ROLES:-gateway,writer,relay,consumer,push}")
bin/stampede "${args[@]}" >"$ART/stampede.log" 2>&1 &
pids+=($!)
# The 429 step's gateway: same services, its own listener and token buckets
# (they are per gateway process). It starts once the first is ready (it has
# applied the migrations).
for i in $(seq 360); do
	curl -fs -o /dev/null --max-time 5 "http://$HTTP_ADDR/readyz" && break
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "e2e: stampede serve exited; last lines of $ART/stampede.log"; tail -n 30 "$ART/stampede.log"; exit 1
	fi
	sleep 0.5
done
if [[ -z ${E2E_ROLES:-} ]]; then
	bin/stampede serve --roles sweeper >"$ART/stampede-sweeper.log" 2>&1 &
	pids+=($!)
	export E2E_SWEEPER_PID=$!
fi
STAMPEDE_HTTP_ADDR=$LIMITED_ADDR STAMPEDE_RATE_USER=0.1 STAMPEDE_RATE_USER_BURST=1 \
	bin/stampede serve --roles gateway --static-dir client/dist >"$ART/stampede-limited.log" 2>&1 &
pids+=($!)
export E2E_LIMITED_URL="http://$LIMITED_ADDR"
if [[ -n ${E2E_PUSH_CMD:-} ]]; then
	bash -c "$E2E_PUSH_CMD" >"$ART/push.log" 2>&1 &
	pids+=($!)
fi

STAMPEDE_ADMIN_TOKEN=$(bin/stampede token --user 1 --admin)
export STAMPEDE_ADMIN_TOKEN
status=0
for flow in $FLOWS; do
	echo "e2e: $flow"
	node "client/e2e/$flow" || { status=$?; break; }
done
if [[ $status -ne 0 ]]; then
	echo "--- last lines of $ART/stampede.log"
	tail -n 30 "$ART/stampede.log" || true
fi
exit $status
