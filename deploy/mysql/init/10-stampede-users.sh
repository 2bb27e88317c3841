#!/bin/sh
# The MySQL users of docker-compose.yml (run once by the mysql image on an
# empty data directory, docker-entrypoint-initdb.d):
#   stampede          the roles: SELECT, INSERT, UPDATE, DELETE on stampede.* only
#   stampede_migrate  `stampede migrate`: every privilege on stampede.*, nothing else
# Root keeps MYSQL_ROOT_PASSWORD and is used by nobody else. The passwords
# come from the environment (STAMPEDE_DB_PASSWORD, STAMPEDE_MIGRATE_DB_PASSWORD);
# use hex or base64 ones (openssl rand -hex 24): they are quoted as SQL strings.
set -eu
# No password on a command line (visible in ps): the client reads MYSQL_PWD,
# the users' passwords come in the here-document on its standard input.
MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysql --protocol=socket -uroot <<SQL
CREATE USER IF NOT EXISTS 'stampede'@'%' IDENTIFIED BY '${STAMPEDE_DB_PASSWORD}';
GRANT SELECT, INSERT, UPDATE, DELETE ON \`stampede\`.* TO 'stampede'@'%';
CREATE USER IF NOT EXISTS 'stampede_migrate'@'%' IDENTIFIED BY '${STAMPEDE_MIGRATE_DB_PASSWORD}';
GRANT ALL PRIVILEGES ON \`stampede\`.* TO 'stampede_migrate'@'%';
FLUSH PRIVILEGES;
SQL
