#!/usr/bin/env bash
# Make sure Redis, RabbitMQ and MariaDB/MySQL answer on loopback and that the
# `stampede` database exists (with --bench also the benchmarks' database
# `stampede_bench` and vhosts `stampede_bench`, `stampede_bench_push`). Idempotent; takes well under a second when
# everything is already up.
#
# With --binaries it only installs the three servers' Debian packages where
# their binaries are missing and starts nothing: `make test` runs servers of
# its own (scripts/testservices.sh) and needs only the binaries.
#
# For each service, in order:
#   1. something already answers on the port  -> use it;
#   2. Docker engine running + deploy/services.compose.yml -> docker compose up -d <svc>;
#   3. otherwise apt-get install the Debian package if its binary is missing
#      and start it in the background on 127.0.0.1.
#
# Environment:
#   STAMPEDE_SERVICES_HOST        host to probe (default 127.0.0.1); services are
#                                 only started here when it is a loopback address
#   STAMPEDE_REDIS_PORT           default 6379
#   STAMPEDE_RABBITMQ_PORT        default 5672 (guest/guest)
#   STAMPEDE_MYSQL_PORT           default 3306 (root, empty password)
#   STAMPEDE_SERVICES_NO_INSTALL  1 = never apt-get install; fail with a message
#                                 when a service is down and its binary is missing
set -euo pipefail

HOST=${STAMPEDE_SERVICES_HOST:-127.0.0.1}
REDIS_PORT=${STAMPEDE_REDIS_PORT:-6379}
RABBITMQ_PORT=${STAMPEDE_RABBITMQ_PORT:-5672}
MYSQL_PORT=${STAMPEDE_MYSQL_PORT:-3306}
NO_INSTALL=${STAMPEDE_SERVICES_NO_INSTALL:-0}

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMPOSE_FILE="$REPO_ROOT/deploy/services.compose.yml" # passwordless, loopback: development only
SALE_CNF="$REPO_ROOT/deploy/mysql/conf/mariadb.cnf"    # MariaDB settings for a sale (docs/mysql.md)
APT_UPDATED=0

log() { printf '%s\n' "$*"; }
die() { printf 'services.sh: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------- probes

# tcp_open PORT: something accepts TCP connections on HOST:PORT.
tcp_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

redis_up() {
	if have redis-cli; then
		[[ $(timeout 2 redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]
	else
		tcp_open "$REDIS_PORT"
	fi
}

# rabbitmq_up: the port speaks AMQP — after the protocol header the broker
# answers with a method frame (type 0x01, Connection.Start). This is a
# protocol-level check like `rabbitmq-diagnostics ping`, but takes ~10 ms instead
# of ~0.5 s and also works for a broker in a container or on another host.
rabbitmq_up() {
	tcp_open "$RABBITMQ_PORT" || return 1
	local first
	first=$(timeout 3 bash -c "
		exec 3<>/dev/tcp/$HOST/$RABBITMQ_PORT
		printf 'AMQP\x00\x00\x09\x01' >&3
		head -c 1 <&3 | od -An -tx1" 2>/dev/null) || return 1
	[[ ${first// /} == 01 ]]
}

mysql_up() {
	if have mysqladmin; then
		# exits 0 whenever the server answers, even on "Access denied"
		mysqladmin -h"$HOST" -P"$MYSQL_PORT" -uroot --connect-timeout=2 ping >/dev/null 2>&1
	else
		tcp_open "$MYSQL_PORT"
	fi
}

# wait_for NAME SECONDS CHECK_FN
wait_for() {
	local name=$1 secs=$2 check=$3 deadline=$((SECONDS + $2))
	until "$check"; do
		((SECONDS < deadline)) || die "$name: not answering on $HOST after ${secs}s"
		sleep 0.5
	done
}

# ---------------------------------------------------------------- starters

is_loopback() { [[ $HOST == 127.0.0.1 || $HOST == localhost || $HOST == ::1 ]]; }

docker_usable() {
	[[ -f $COMPOSE_FILE ]] && have docker && docker info >/dev/null 2>&1
}

compose() { docker compose -f "$COMPOSE_FILE" "$@"; }

# ensure_binary BINARY PACKAGE: install PACKAGE when BINARY is missing.
ensure_binary() {
	local bin=$1 pkg=$2
	if [[ -x $bin ]] || have "$bin"; then
		return 0
	fi
	if [[ $NO_INSTALL == 1 ]]; then
		die "$pkg is not running on $HOST and $bin is not installed (STAMPEDE_SERVICES_NO_INSTALL=1; install $pkg or start the service yourself)"
	fi
	have apt-get || die "$bin is missing and apt-get is not available; install $pkg yourself"
	local sudo=()
	((EUID == 0)) || sudo=(sudo)
	# Waits for a dpkg lock another program (or a second make test) holds.
	if ((APT_UPDATED == 0)); then
		log "apt-get update"
		"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
		APT_UPDATED=1
	fi
	log "installing $pkg"
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$pkg" >/dev/null
}

start_redis_local() {
	ensure_binary redis-server redis-server
	mkdir -p /var/lib/redis /var/log/redis
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$REDIS_PORT" --save "" \
		--appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null
}

start_rabbitmq_local() {
	ensure_binary rabbitmq-server rabbitmq-server
	rabbitmq-server -detached >/dev/null 2>&1
}

# mariadb_extra_args: command-line options for settings the config files lack.
mariadb_extra_args() {
	local defaults
	defaults=$(/usr/sbin/mariadbd --print-defaults 2>/dev/null || true)
	[[ $defaults == *--user=* ]] || printf '%s\n' --user=mysql
	[[ $defaults == *--bind-address=* ]] || printf '%s\n' --bind-address=127.0.0.1
	[[ $defaults == *--port=* ]] || printf '%s\n' "--port=$MYSQL_PORT"
}

start_mariadb_local() {
	ensure_binary /usr/sbin/mariadbd mariadb-server
	mkdir -p /run/mysqld
	chown mysql:mysql /run/mysqld
	if [[ ! -d /var/lib/mysql/mysql ]]; then
		log "mysql: initialising /var/lib/mysql"
		mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
	fi
	local extra=()
	mapfile -t extra < <(mariadb_extra_args)
	# The settings for a sale (docs/mysql.md); --defaults-extra-file must
	# come first. The server's own config files are still read.
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- \
		"--defaults-extra-file=$SALE_CNF" "${extra[@]}"
}

# mysql_sale_advice: a server this script did not start (or started before
# it shipped the settings) may run with a buffer pool or redo log too small
# for a sale; say what to set, change nothing.
mysql_sale_advice() {
	[[ -n $(mysql_client) ]] || return 0
	local row pool redo
	row=$(mysql_tcp -N -e "SELECT @@innodb_buffer_pool_size, COALESCE(@@innodb_log_file_size, 0)" 2>/dev/null) || return 0
	read -r pool redo <<<"$row"
	if ((pool < 1073741824 || redo < 1073741824)); then
		log "mysql: note: innodb_buffer_pool_size is $((pool >> 20)) MB and the redo log $((redo >> 20)) MB;" \
			"a sale wants 1 GB each: set them in the server's configuration (deploy/mysql/conf/mariadb.cnf, docs/mysql.md); a running server is left as it is"
	fi
}

# ---------------------------------------------------------------- per service

# ensure NAME COMPOSE_SERVICE CHECK_FN LOCAL_START_FN WAIT_SECONDS
ensure() {
	local name=$1 svc=$2 check=$3 start=$4 secs=$5 how
	if "$check"; then
		log "$name: up (already running)"
		return
	fi
	if docker_usable; then
		compose up -d "$svc" >/dev/null
		how="docker compose"
	elif is_loopback; then
		"$start"
		how="started locally"
		if [[ $name == rabbitmq ]] && have rabbitmqctl; then
			# the Erlang node takes a while; await_startup blocks until the app runs
			timeout "$secs" rabbitmqctl -q await_startup >/dev/null 2>&1 || true
		fi
	else
		die "$name: nothing answers on $HOST and $HOST is not 127.0.0.1/localhost, so it cannot be started here"
	fi
	wait_for "$name" "$secs" "$check"
	log "$name: up ($how)"
}

# ---------------------------------------------------------------- mysql setup

mysql_client() {
	if have mariadb; then echo mariadb; elif have mysql; then echo mysql; fi
}

mysql_tcp() {
	"$(mysql_client)" -h"$HOST" -P"$MYSQL_PORT" -uroot --connect-timeout=5 "$@"
}

# fix_root_tcp_login: Debian's MariaDB authenticates root@localhost via
# unix_socket only; allow an empty password over TCP as well (the socket login
# keeps working). root@127.0.0.1 covers servers running with skip-name-resolve.
fix_root_tcp_login() {
	is_loopback && [[ -S /run/mysqld/mysqld.sock ]] || return 1
	log "mysql: enabling root login over TCP with an empty password"
	"$(mysql_client)" -uroot --protocol=socket -e "
		ALTER USER root@localhost IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
		CREATE USER IF NOT EXISTS root@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
		GRANT ALL PRIVILEGES ON *.* TO root@'127.0.0.1' WITH GRANT OPTION;
		FLUSH PRIVILEGES;" >/dev/null
}

create_database() {
	local db=${1:-stampede}
	local sql="CREATE DATABASE IF NOT EXISTS $db CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if [[ -z $(mysql_client) ]]; then
		docker_usable || die "mysql: no mysql/mariadb client installed to create the database"
		compose exec -T mysql mysql -uroot -e "$sql"
	elif ! mysql_tcp -e "$sql" 2>/dev/null; then
		fix_root_tcp_login || die "mysql: root cannot log in over TCP to $HOST:$MYSQL_PORT with an empty password"
		mysql_tcp -e "$sql"
	fi
	log "mysql: database $db ready"
}

# create_vhost NAME: a RabbitMQ vhost with full permissions for guest.
create_vhost() {
	local ctl=(rabbitmqctl)
	if ! have rabbitmqctl; then
		docker_usable || die "rabbitmq: no rabbitmqctl to create vhost $1"
		ctl=(docker compose -f "$COMPOSE_FILE" exec -T rabbitmq rabbitmqctl)
	fi
	"${ctl[@]}" -q add_vhost "$1" >/dev/null 2>&1 || true # exists already
	"${ctl[@]}" -q set_permissions -p "$1" guest '.*' '.*' '.*' >/dev/null
	log "rabbitmq: vhost $1 ready"
}

# reset_bench empties the benchmarks' own database (stampede_bench), Redis
# database (6) and vhost (stampede_bench) — BENCH_ENV of the Makefile — where
# the clients to do so are installed (the database and vhost are made again
# right after).
reset_bench() {
	if [[ -n $(mysql_client) ]]; then
		mysql_tcp -e "DROP DATABASE IF EXISTS stampede_bench" 2>/dev/null || true
	fi
	if have redis-cli; then
		redis-cli -h "$HOST" -p "$REDIS_PORT" -n 6 flushdb >/dev/null 2>&1 || true
	fi
	if have rabbitmqctl; then
		rabbitmqctl -q delete_vhost stampede_bench >/dev/null 2>&1 || true
	fi
	log "bench: database stampede_bench, Redis DB 6 and vhost stampede_bench emptied"
}

# ---------------------------------------------------------------- main

if [[ ${1:-} == --binaries ]]; then
	ensure_binary redis-server redis-server
	ensure_binary redis-cli redis-tools
	ensure_binary rabbitmq-server rabbitmq-server
	ensure_binary /usr/sbin/mariadbd mariadb-server
	ensure_binary mariadb-install-db mariadb-server
	ensure_binary mariadb mariadb-client
	exit 0
fi

ensure redis redis redis_up start_redis_local 30
ensure rabbitmq rabbitmq rabbitmq_up start_rabbitmq_local 60
ensure mysql mysql mysql_up start_mariadb_local 60
create_database stampede
mysql_sale_advice
# `--bench`: the benchmarks' own database and vhost (make bench, make
# bench-scale), so their products and orders never mix with the demo's.
# The drain scenario reads RabbitMQ's own message counters from the
# rabbitmq_prometheus plugin (port 15692); enabling it needs no restart.
# Emptied first: orders an earlier run left WAITING_PAY reach their pay
# deadline 15 minutes later, and their closes and releases (three Redis
# scripts an order) ran inside a later run's steps and took a third of
# Redis's time (seen: a 4,000/s step with 2,000 closes/s of an earlier run).
# Every run starts from an empty database, Redis DB and vhost: the ones of
# BENCH_ENV in the Makefile, which nothing else uses.
if [[ ${1:-} == --bench ]]; then
	reset_bench
	create_database stampede_bench
	create_vhost stampede_bench
	create_vhost stampede_bench_push
	if have rabbitmq-plugins && is_loopback; then
		timeout 60 rabbitmq-plugins -q enable rabbitmq_prometheus >/dev/null 2>&1 \
			&& log "rabbitmq: plugin rabbitmq_prometheus enabled (message counters on :15692)" \
			|| log "rabbitmq: could not enable rabbitmq_prometheus; the drain reports no message counts"
	fi
fi
