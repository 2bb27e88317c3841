#!/usr/bin/env bash
# Browser end-to-end test with everything it needs: installs Debian's chromium
# and the client's npm packages if missing, builds and starts `stampede serve`
# (every role) on ports, a MySQL database, a Redis database and a RabbitMQ
# vhost of its own, runs client/e2e/flow.mjs and drops.mjs against it and
# stops it again. Screenshots land in client/e2e/artifacts/, the server log in
# client/e2e/artifacts/stampede.log.
#
# The servers are the test servers of the Go tests: STAMPEDE_TEST_REDIS_ADDR,
# STAMPEDE_TEST_MYSQL_DSN and STAMPEDE_TEST_AMQP_URL (`make test` sets them to
# servers of the run's own, scripts/testservices.sh; unset: the loopback
# defaults). On them it claims a Redis database only while it is empty
# (lua/luatest's claim, the same key and script) and creates the MySQL
# database and the vhost "stampede_test_e2e_<UTC yymmddhhmm><random>"; at the end
# it empties and gives back that Redis database and drops that database and
# vhost — nothing it did not create. Needs Go and Node ≥ 20.19, redis-cli, a
# mariadb or mysql client and rabbitmqctl for the broker.
# Environment (all optional):
#   E2E_HTTP_ADDR   gateway address (default a free loopback port below the ephemeral range)
#   E2E_PUSH_ADDR   push address    (idem)
#   E2E_LIMITED_ADDR a second gateway (gateway role only) whose per-user bucket
#                   refills one token per 10 s, burst 1, for the 429 step (idem)
#   E2E_ROLES       roles to run in the one server process (default: every role but
#                   the sweeper, which then runs as a process of its own)
#   E2E_PUSH_CMD    extra command to start next to stampede (e.g. a push built elsewhere)
#   E2E_FLOWS       the scripts to run, in order (default "flow.mjs drops.mjs": the
#                   shop, console and waiting room, then the fair drops of issue 28)
#   E2E_REDIS_ADDR, E2E_MYSQL_PORT, E2E_AMQP_PORT  override the Redis address and
#                   the MySQL and RabbitMQ ports of the test servers
#   E2E_RABBIT_NODE that broker's node name for rabbitmqctl -n (default: rabbitmqctl's)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
ART=$ROOT/client/e2e/artifacts
# listening PORT: whether something on loopback accepts connections on PORT.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_port: a loopback port below the kernel's ephemeral range that nothing
# listens on, drawn at random (another run on the machine draws too; none
# is handed out twice here).
TAKEN=" "
free_port() {
	local lo hi p
	read -r hi _ </proc/sys/net/ipv4/ip_local_port_range
	lo=$((hi - 10000))
	((lo >= 1024)) || lo=1024
	for _ in $(seq 200); do
		p=$((lo + RANDOM % (hi - lo)))
		if [[ $TAKEN != *" $p "* ]] && ! listening "$p"; then
			TAKEN+="$p "
			echo "$p"
			return
		fi
	done
	echo "e2e: no free loopback port" >&2
	exit 1
}
FLOWS=${E2E_FLOWS:-flow.mjs drops.mjs}

# The test servers and the namespace of this run on them.
REDIS_ADDR=${E2E_REDIS_ADDR:-${STAMPEDE_TEST_REDIS_ADDR:-127.0.0.1:6379}}
MYSQL_DSN=${STAMPEDE_TEST_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/}
AMQP_URL=${STAMPEDE_TEST_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
[[ $MYSQL_DSN =~ ^([^:@]*)(:([^@]*))?@tcp\(([^:]+):([0-9]+)\)/ ]] ||
	{ echo "e2e: cannot read STAMPEDE_TEST_MYSQL_DSN=$MYSQL_DSN (user[:password]@tcp(host:port)/)" >&2; exit 1; }
MYSQL_USER=${BASH_REMATCH[1]} MYSQL_PASS=${BASH_REMATCH[3]} MYSQL_HOST=${BASH_REMATCH[4]}
MYSQL_PORT=${E2E_MYSQL_PORT:-${BASH_REMATCH[5]}}
[[ $AMQP_URL =~ ^amqp://(([^:@]*)(:([^@]*))?@)?([^:/]+):?([0-9]*)/? ]] ||
	{ echo "e2e: cannot read STAMPEDE_TEST_AMQP_URL=$AMQP_URL" >&2; exit 1; }
AMQP_USER=${BASH_REMATCH[2]:-guest} AMQP_PASS=${BASH_REMATCH[4]:-guest} AMQP_HOST=${BASH_REMATCH[5]}
AMQP_PORT=${E2E_AMQP_PORT:-${BASH_REMATCH[6]:-5672}}
NAME=stampede_test_e2e_$(date -u +%y%m%d%H%M)$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
rmq=(rabbitmqctl -q)
[[ -n ${E2E_RABBIT_NODE:-} ]] && rmq+=(-n "$E2E_RABBIT_NODE")
mysql_cli=()
for cli in mariadb mysql; do
	if command -v "$cli" >/dev/null 2>&1; then
		mysql_cli=("$cli" -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER")
		[[ -n $MYSQL_PASS ]] && mysql_cli+=("-p$MYSQL_PASS")
		break
	fi
done
((${#mysql_cli[@]})) || { echo "e2e: no mariadb or mysql client" >&2; exit 1; }
rcli=(redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}")
mkdir -p "$ART"

if [[ ! -x /usr/bin/chromium ]]; then
	# Two runs at once (two make test) take turns (flock), and wait for a
	# dpkg lock another program holds instead of failing at once.
	(
		flock 9
		if [[ ! -x /usr/bin/chromium ]]; then
			echo "e2e: installing chromium"
			apt-get -o DPkg::Lock::Timeout=600 update -qq &&
				DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
		fi
	) 9>"${TMPDIR:-/tmp}/stampede-apt.lock" || exit 1
fi
if [[ ! -d client/node_modules/playwright-core ]]; then
	echo "e2e: npm ci"
	(cd client && npm ci --no-audit --no-fund --loglevel=error)
fi

go build -o bin/stampede ./cmd/stampede

# The namespace of this run, created here and removed at the end (cleanup):
# every run sees only its own sales and dead letters, and nothing else on
# the servers is touched.
# A Redis database claimed while empty: lua/luatest's ClaimKey and claim
# script (value "<token>|<lease end, Unix ms>|<host>|<pid>": a later Go test
# run takes it over once this process is gone).
CLAIM_KEY=stampede-test:claim
CLAIM="$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')|$((($(date +%s) + 3 * 3600) * 1000))|$(hostname | tr '|' _)|$$"
CLAIM_LUA="if redis.call('DBSIZE') == 0 then redis.call('SET', KEYS[1], ARGV[1]) return 1 end return 0"
RELEASE_LUA="if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end redis.call('FLUSHDB') return 1"
REDIS_DB=
ndb=$("${rcli[@]}" config get databases 2>/dev/null | sed -n 2p)
[[ $ndb =~ ^[0-9]+$ ]] || ndb=16
start=$((RANDOM % (ndb - 1)))
for ((i = 0; i < ndb - 1; i++)); do
	db=$((1 + (start + i) % (ndb - 1)))
	if [[ $("${rcli[@]}" -n "$db" eval "$CLAIM_LUA" 1 "$CLAIM_KEY" "$CLAIM" 2>/dev/null) == 1 ]]; then
		REDIS_DB=$db
		break
	fi
done
[[ -n $REDIS_DB ]] || { echo "e2e: no empty Redis database to claim at $REDIS_ADDR (databases 1-$((ndb - 1)) hold data)" >&2; exit 1; }
made_db=0 made_vhost=0
cleanup_namespace() {
	"${rcli[@]}" -n "$REDIS_DB" eval "$RELEASE_LUA" 1 "$CLAIM_KEY" "$CLAIM" >/dev/null 2>&1 ||
		echo "e2e: could not give back Redis database $REDIS_DB at $REDIS_ADDR" >&2
	if ((made_db)); then
		"${mysql_cli[@]}" -e "DROP DATABASE IF EXISTS \`$NAME\`" 2>/dev/null || echo "e2e: could not drop database $NAME" >&2
	fi
	if ((made_vhost)); then
		"${rmq[@]}" delete_vhost "$NAME" >/dev/null 2>&1 || echo "e2e: could not delete vhost $NAME" >&2
	fi
}
trap cleanup_namespace EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The database: created here (no IF NOT EXISTS: a database of that name that
# exists is not this run's); the server migrates it (--migrate).
"${mysql_cli[@]}" -e "CREATE DATABASE \`$NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
made_db=1
# The vhost, opened to the URL's user (one rabbitmqctl call).
printf '{"vhosts":[{"name":"%s"}],"permissions":[{"user":"%s","vhost":"%s","configure":".*","write":".*","read":".*"}]}' \
	"$NAME" "$AMQP_USER" "$NAME" | "${rmq[@]}" import_definitions >/dev/null
made_vhost=1
echo "e2e: Redis database $REDIS_DB at $REDIS_ADDR, MySQL database and RabbitMQ vhost $NAME"

if [[ -n ${E2E_HTTP_ADDR:-} ]]; then HTTP_ADDR=$E2E_HTTP_ADDR; else HTTP_ADDR=127.0.0.1:$(free_port); fi
if [[ -n ${E2E_PUSH_ADDR:-} ]]; then PUSH_ADDR=$E2E_PUSH_ADDR; else PUSH_ADDR=127.0.0.1:$(free_port); fi
# The second gateway of the 429 step: one token per 10 s per user (burst 1).
if [[ -n ${E2E_LIMITED_ADDR:-} ]]; then LIMITED_ADDR=$E2E_LIMITED_ADDR; else LIMITED_ADDR=127.0.0.1:$(free_port); fi

# Development mode: the test logs in through the demo login and pays through
# the demo checkout (docs/production.md).
export STAMPEDE_MODE=development
export STAMPEDE_HTTP_ADDR=$HTTP_ADDR
export STAMPEDE_PUSH_ADDR=$PUSH_ADDR
export STAMPEDE_REDIS_DB=$REDIS_DB
export STAMPEDE_REDIS_ADDR=$REDIS_ADDR
export STAMPEDE_MYSQL_DSN="$MYSQL_USER${MYSQL_PASS:+:$MYSQL_PASS}@tcp($MYSQL_HOST:$MYSQL_PORT)/$NAME?parseTime=true"
export STAMPEDE_AMQP_URL="amqp://$AMQP_USER:$AMQP_PASS@$AMQP_HOST:$AMQP_PORT/$NAME"
export STAMPEDE_PUSH_URL="ws://$PUSH_ADDR/ws"
export STAMPEDE_URL="http://$HTTP_ADDR"
# The payment callback key, shared with flow.mjs (it signs a late payment's callback).
export STAMPEDE_PAYMENT_SECRET=${STAMPEDE_PAYMENT_SECRET:-stampede-e2e-payment-secret-0123456789}

pids=()
cleanup() {
	# (SIGCONT: a sweeper drops.mjs held with SIGSTOP acts on the TERM.)
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; kill -CONT "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	cleanup_namespace
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
