#!/usr/bin/env bash
# Private Redis, MariaDB and RabbitMQ servers for one test run, so the tests
# never touch the servers (and data) a developer runs on the default ports.
#
#   scripts/testservices.sh up DIR     start the three servers under DIR (data,
#                                      logs, pids) on free loopback ports below
#                                      the kernel's ephemeral range; write
#                                      DIR/env (export lines) and print it
#   scripts/testservices.sh down DIR   stop them (only the processes of DIR's
#                                      pid files) and remove DIR
#
# `make test` (scripts/test.sh) runs it once per run. DIR/env sets the
# variables the test helpers read (lua/luatest, persistence/persistencetest,
# pipeline/pipelinetest, systest, client/e2e/run.sh):
#   STAMPEDE_TEST_REDIS_ADDR, STAMPEDE_TEST_MYSQL_DSN, STAMPEDE_TEST_AMQP_URL;
#   STAMPEDE_TEST_OWNED, the three servers' host:port (the helpers pool their
#   databases and vhosts on a server of the run's own);
#   PATH with DIR/bin first, where a rabbitmqctl for this node lives (the
#   node's own Erlang cookie; the system broker's is never needed), and
#   RABBITMQ_NODENAME.
#
# Two runs at once each get servers of their own. Needs the binaries
# redis-server, mariadbd (+ mariadb-install-db) and rabbitmq-server: `make
# services` installs the Debian packages when they are missing.
set -euo pipefail

die() { printf 'testservices.sh: %s\n' "$*" >&2; exit 1; }

# free_port: a loopback port below the ephemeral range nothing listens on.
free_port() {
	local lo hi p
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
	hi=$lo
	lo=$((hi - 10000))
	((lo >= 1024)) || lo=1024
	for _ in $(seq 200); do
		p=$((lo + RANDOM % (hi - lo)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [[ ! " ${TAKEN:-} " == *" $p "* ]]; then
			TAKEN="${TAKEN:-} $p"
			echo "$p"
			return
		fi
	done
	die "no free loopback port"
}

# wait_until SECONDS WHAT CMD...: run CMD until it succeeds.
wait_until() {
	local secs=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || die "$what did not start within ${secs}s (logs in $DIR)"
		sleep 0.2
	done
}

mariadbd_bin() {
	if command -v mariadbd >/dev/null; then command -v mariadbd; else echo /usr/sbin/mariadbd; fi
}

rabbit_bin() {
	if [[ -x /usr/lib/rabbitmq/bin/$1 ]]; then echo "/usr/lib/rabbitmq/bin/$1"; else command -v "$1"; fi
}

up() {
	[[ ! -e $DIR/env ]] || die "$DIR/env exists: servers already up there (down $DIR first)"
	mkdir -p "$DIR/bin"
	DIR=$(cd "$DIR" && pwd)
	# A failed or interrupted start leaves nothing running.
	trap '[[ $UP_OK == 1 ]] || down >/dev/null 2>&1' EXIT
	trap 'exit 130' INT TERM
	local redis_port mysql_port amqp_port dist_port node
	redis_port=$(free_port)
	mysql_port=$(free_port)
	amqp_port=$(free_port)
	dist_port=$(free_port)
	node="stampede-test-$$-$redis_port@localhost"

	# Redis: no persistence; 64 databases so packages and parallel tests
	# each take numbers of their own.
	mkdir -p "$DIR/redis"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
		--databases 64 --dir "$DIR/redis" --pidfile "$DIR/redis/pid" --logfile "$DIR/redis/log" >/dev/null

	# RabbitMQ: a node of its own (name, ports, data, Erlang cookie), and a
	# rabbitmqctl in DIR/bin that reaches it with that cookie. It boots in
	# the background while MariaDB starts.
	mkdir -p "$DIR/rabbitmq"
	(umask 077 && od -An -N20 -tx1 /dev/urandom | tr -d ' \n' | tr a-f A-F >"$DIR/rabbitmq/.erlang.cookie")
	chmod 400 "$DIR/rabbitmq/.erlang.cookie"
	echo '[].' >"$DIR/rabbitmq/enabled_plugins"
	cat >"$DIR/bin/rabbitmqctl" <<EOF
#!/bin/sh
# rabbitmqctl for the test RabbitMQ node of $DIR (scripts/testservices.sh).
HOME=$DIR/rabbitmq RABBITMQ_NODENAME=$node exec $(rabbit_bin rabbitmqctl) "\$@"
EOF
	chmod +x "$DIR/bin/rabbitmqctl"
	(
		export HOME=$DIR/rabbitmq RABBITMQ_NODENAME=$node RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
			RABBITMQ_NODE_PORT=$amqp_port RABBITMQ_DIST_PORT=$dist_port \
			RABBITMQ_MNESIA_BASE=$DIR/rabbitmq/mnesia RABBITMQ_LOG_BASE=$DIR/rabbitmq/log \
			RABBITMQ_ENABLED_PLUGINS_FILE=$DIR/rabbitmq/enabled_plugins RABBITMQ_PID_FILE=$DIR/rabbitmq/pid \
			RABBITMQ_CONFIG_FILE=$DIR/rabbitmq/rabbitmq RABBITMQ_ADVANCED_CONFIG_FILE=$DIR/rabbitmq/advanced.config
		setsid "$(rabbit_bin rabbitmq-server)" >"$DIR/rabbitmq/out" 2>&1 </dev/null &
		echo $! >"$DIR/rabbitmq/launcher.pid"
	)

	# MariaDB: a data directory of its own, root over TCP with no password.
	mkdir -p "$DIR/mysql"
	# Once more after a failure (one of two runs started at the same moment
	# failed here once); then its log is kept next to DIR, which goes.
	local try
	for try in 1 2; do
		rm -rf "$DIR/mysql/data"
		mariadb-install-db --no-defaults --auth-root-authentication-method=normal --user="$(id -un)" \
			--datadir="$DIR/mysql/data" --skip-test-db >"$DIR/mysql/install.log" 2>&1 && break
		if ((try == 2)); then
			cp "$DIR/mysql/install.log" "$DIR.mariadb-install.log"
			die "mariadb-install-db failed twice (log: $DIR.mariadb-install.log): $(grep -E 'ERROR|rror:|failed' "$DIR/mysql/install.log" | head -n 10)"
		fi
	done
	local start="$(mariadbd_bin) --no-defaults --datadir=$DIR/mysql/data --port=$mysql_port --bind-address=127.0.0.1 --socket=$DIR/mysql/sock --pid-file=$DIR/mysql/pid --user=$(id -un) --skip-log-bin --innodb-buffer-pool-size=512M --innodb-log-file-size=256M --innodb-flush-log-at-trx-commit=2 --max-connections=2000 --log-error=$DIR/mysql/err"
	echo "setsid $start </dev/null >/dev/null 2>&1 &" >"$DIR/mysql/start.sh"
	sh "$DIR/mysql/start.sh"
	wait_until 60 MariaDB mariadb --no-defaults -h127.0.0.1 -P"$mysql_port" -uroot -e 'SELECT 1'
	wait_until 30 MariaDB-pid test -s "$DIR/mysql/pid"

	wait_until 30 Redis redis-cli -p "$redis_port" ping
	wait_until 120 RabbitMQ "$DIR/bin/rabbitmqctl" -q await_startup

	cat >"$DIR/env" <<EOF
export STAMPEDE_TEST_REDIS_ADDR=127.0.0.1:$redis_port
export STAMPEDE_TEST_MYSQL_DSN='root@tcp(127.0.0.1:$mysql_port)/'
export STAMPEDE_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$amqp_port/
export STAMPEDE_TEST_OWNED=127.0.0.1:$redis_port,127.0.0.1:$mysql_port,127.0.0.1:$amqp_port
export RABBITMQ_NODENAME=$node
export PATH="$DIR/bin:\$PATH"
export STAMPEDE_TEST_SERVICES_DIR=$DIR
EOF
	UP_OK=1
	cat "$DIR/env"
}

down() {
	[[ -d $DIR ]] || return 0
	local pid
	if [[ -x $DIR/bin/rabbitmqctl ]]; then
		timeout 60 "$DIR/bin/rabbitmqctl" -q stop >/dev/null 2>&1 || true
	fi
	for f in "$DIR/redis/pid" "$DIR/mysql/pid" "$DIR/rabbitmq/pid"; do
		[[ -s $f ]] || continue
		pid=$(cat "$f")
		kill -TERM "$pid" 2>/dev/null || true
	done
	# The launcher is the leader of the node's own process group (setsid):
	# the group goes too, also a node that had not written its pid file yet.
	if [[ -s $DIR/rabbitmq/launcher.pid ]]; then
		kill -TERM -- "-$(cat "$DIR/rabbitmq/launcher.pid")" 2>/dev/null || true
	fi
	for f in "$DIR/redis/pid" "$DIR/mysql/pid" "$DIR/rabbitmq/pid"; do
		[[ -s $f ]] || continue
		pid=$(cat "$f")
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -rf "$DIR"
}

UP_OK=0
cmd=${1:-}
DIR=${2:-}
[[ -n $DIR ]] || die "usage: $0 up|down DIR"
case $cmd in
up) up ;;
down) down ;;
*) die "usage: $0 up|down DIR" ;;
esac
