#!/bin/bash
# Writes $ZOO_CONF_DIR/zoo.cfg from the official zookeeper image's variables (unless a zoo.cfg is
# mounted there), then runs the server in the foreground. `docker run IMAGE bash` runs bash instead.
set -euo pipefail
if [ "${1:-}" != "zkServer" ]; then
    exec "$@"
fi
cfg="$ZOO_CONF_DIR/zoo.cfg"
if [ ! -f "$cfg" ]; then
    {
        echo "dataDir=$ZOO_DATA_DIR"
        echo "dataLogDir=$ZOO_DATA_LOG_DIR"
        echo "tickTime=${ZOO_TICK_TIME:-2000}"
        echo "initLimit=${ZOO_INIT_LIMIT:-5}"
        echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
        echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
        echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-0}"
        echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
        echo "standaloneEnabled=${ZOO_STANDALONE_ENABLED:-true}"
        # Debian's package has no Jetty admin server wiring: off unless asked for.
        echo "admin.enableServer=${ZOO_ADMINSERVER_ENABLED:-false}"
        echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
        if [ -z "${ZOO_SERVERS:-}" ]; then
            echo "clientPort=${ZOO_PORT:-2181}"
        else
            for server in $ZOO_SERVERS; do echo "$server"; done
        fi
        if [ -n "${ZOO_CFG_EXTRA:-}" ]; then
            for extra in $ZOO_CFG_EXTRA; do echo "$extra"; done
        fi
    } > "$cfg"
fi
if [ -n "${ZOO_MY_ID:-}" ] && [ ! -f "$ZOO_DATA_DIR/myid" ]; then
    echo "$ZOO_MY_ID" > "$ZOO_DATA_DIR/myid"
fi
# shellcheck disable=SC2086 - JVMFLAGS is a list of flags
# slf4j's log4j binding, so the server logs (console, /etc/zookeeper/log4j.properties).
exec java $JVMFLAGS -cp "/etc/zookeeper:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
