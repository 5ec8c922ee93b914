package main

import (
	"flag"
	"strings"
)

// mainUsage is the overview that "locksmith help" prints.
const mainUsage = `locksmith runs a command under a distributed lock kept in Redis, so that of
several hosts that start the same job (from the same crontab, say) only one
runs it at a time.

Usage:

  locksmith run     [flags] --key KEY -- COMMAND [ARGS...]
  locksmith run     [flags] --key KEY --key KEY... -- COMMAND [ARGS...]
  locksmith elect   [flags] --name NAME [--value VALUE] -- COMMAND [ARGS...]
  locksmith elect   [flags] --name NAME --observe [--json]
  locksmith status  [flags] --key KEY [--json] [--show-token]
  locksmith status  [flags] --key KEY --watch [--interval D] [--json] [--show-token]
  locksmith ls      [flags] [--prefix PREFIX] [--limit N] [--json]
  locksmith release [flags] --key KEY --force
  locksmith help [COMMAND]
  locksmith --version

Commands:

  run       obtain the lock, run COMMAND while renewing the lock, release it
  elect     campaign in a leader election, run COMMAND while leading, and
            campaign again when it exits; or (--observe) print each leader
  status    show whether the lock is held, by whom (a mark of the token;
            the token itself with --show-token), for how long;
            the last fencing token, and the record of a run --once;
            with --watch, follow it and print each change
  ls        list the locks held under the prefix, with their holders
            (an election's leader), time left, fence and waiters
  release   delete the lock, whoever holds it (needs --force)

Redis:

  The server is given by --redis URL or, so that the password is not in
  argv for ps to show, by the environment variable REDIS_URL; without
  either, redis://localhost:6379/0. locksmith never prints a password.

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
    rediss://...                 the same over TLS
    unix:///PATH?db=N            a Unix socket

  Redis Cluster: give --cluster, and a URL that names one node or more
  (any one that answers will do; locksmith finds the others):

    redis://[[USER]:PASSWORD@]HOST:PORT?addr=HOST2:PORT2&addr=HOST3:PORT3

  Sentinel: a URL with master_name names the master that the sentinels
  at HOST (and at each addr) monitor under NAME; its user and password are
  the sentinels', and the password parameter is the master's:

    redis://[[USER]:PASSWORD@]SENTINEL:PORT[/DB]?master_name=NAME
        &addr=SENTINEL2:PORT2&password=PASSWORD          (on one line)

  Both work over TLS with rediss://. A URL with addr but neither
  --cluster nor master_name, or with both, is a usage error, and so are
  the parameters that locksmith sets: dial_timeout (--dial-timeout),
  read_timeout and write_timeout (--timeout), max_retries and
  dialer_retries.

  --dial-timeout bounds each connection, its TLS handshake included.
  locksmith does not retry a connection that fails: when it cannot reach
  Redis it exits 69 and names the likely cause (nothing listening, no TLS
  where rediss:// expects it, TLS where redis:// expects none). On a
  Cluster, and through sentinels, it tries the other addresses it knows,
  each within --dial-timeout. For
  rediss://, the server's certificate must be signed by a CA the system
  trusts, or by one in SSL_CERT_FILE or SSL_CERT_DIR.

  The lock KEY is stored at the Redis key PREFIX+KEY (--prefix, default
  "locksmith:").

Exit status:

  0      COMMAND exited 0; run --skip-ok found the lock held elsewhere,
         or run --once --skip-ok found the job done; status, ls or
         release succeeded; elect --observe or status --watch was
         interrupted
  N      COMMAND exited with status N
  128+N  COMMAND was killed by signal N, or locksmith got signal N
         before COMMAND started (elect: while campaigning)
  64     usage error: bad flags or arguments, or release without --force
  69     Redis unreachable or answering errors; run runs nothing
         (elect: see 'locksmith help elect')
  75     the lock (of a set, any) is held elsewhere (still, after --wait);
         run runs nothing and takes nothing
  79     the lock (of a set, any) was lost before COMMAND exited; COMMAND was stopped
         if it was still running (with --once, nothing was recorded);
         elect --exit-with-command: leadership was lost
  80     run --once found that a run under KEY has already succeeded;
         run runs nothing
  126    COMMAND cannot be executed
  127    COMMAND not found

Run 'locksmith help COMMAND' for the flags and examples of a command.
`

const runIntro = `Usage: locksmith run [flags] --key KEY -- COMMAND [ARGS...]
       locksmith run [flags] --key KEY --key KEY... -- COMMAND [ARGS...]

Run COMMAND while holding the lock KEY, so that of all the hosts sharing the
Redis server only one runs such a COMMAND at a time.

run tries once to obtain the lock, or with --wait waits for it. If it is
held elsewhere, run prints one line to stderr, runs nothing and exits 75
(0 with --skip-ok). If Redis cannot be reached or answers an error, run
runs nothing and exits 69: it never takes an unknown answer for a free lock.

With the lock, run starts COMMAND in a process group of its own, with the
lock's KEY (without the prefix) in LOCKSMITH_KEY and this run's token (the
lock's value in Redis) in LOCKSMITH_TOKEN, and renews the lock every third
of --ttl. When COMMAND exits, run releases the lock and exits with
COMMAND's status, or 128+N if signal N killed COMMAND.

--once runs COMMAND at most once per KEY, for a job that several hosts, or
a scheduler that retries, start more than once; put the period the run is
for in KEY (report:2026-11-30). Before it takes the lock, and again once it
holds it, run looks for the record of a run under KEY that succeeded. If
there is one, run prints one line to stderr, runs nothing and exits 80 (0
with --skip-ok). When COMMAND exits 0, run records its success and
releases the lock in one step; the record is kept for --done-ttl, after
which KEY runs again. When COMMAND fails, is killed, or the lock is lost,
nothing is recorded and run exits as without --once, so the next run
--once runs COMMAND again. A run that finds the lock held exits 75 at
once, not knowing yet whether the holder will succeed; with --wait it
waits, and then exits 80 if the holder succeeded or runs COMMAND if it
failed.

--limit N runs COMMAND while holding one of N permits of a semaphore
named KEY instead of the lock, so that at most N runs under KEY run at
once (as consul lock -n does): the same exit statuses, --wait, --ttl,
--fencing and loss handling apply, a permit being lost as a lock is. Each
permit expires on its own, so the permit of a locksmith that died comes
back after --ttl. A KEY is either a lock or a semaphore; --limit cannot
be combined with --once.

--key given more than once takes a set of locks: every KEY at once, or
none (if any is held elsewhere, run exits 75 and takes none; --wait waits
for the whole set). One token holds every KEY, so status shows the same
token mark on each, and says that the KEY is held as part of a set of N
keys; ls shows the set's mark beside each of its keys. COMMAND gets the keys, sorted and separated by spaces,
in LOCKSMITH_KEYS and LOCKSMITH_KEY (a key of a set cannot contain white
space); with --fencing, LOCKSMITH_FENCE is the highest of the keys'
fencing tokens and LOCKSMITH_FENCES holds each key's own, as KEY=FENCE
separated by spaces: pass each resource the token of its own key. The
set is lost as a whole when any KEY is lost (exit 79, as for a lock).
--once and --limit take one KEY. On Redis Cluster, keys that share a hash
slot ({order:42}:items) are taken in one step, and keys in different slots
one slot after the other.

--fencing gives COMMAND a fencing token in LOCKSMITH_FENCE: a decimal
integer larger than any token given to an earlier holder of KEY (compare
them as numbers). A holder that was paused or cut off from Redis may run
on after its lock has expired and passed to another; to be safe from it,
COMMAND passes the token with every write, and the resource remembers the
largest token it has seen and refuses writes that carry a smaller one.
The counter that issues the tokens is kept for ever, one per KEY; with
--fence-ttl DURATION it expires DURATION after the last token was taken,
for keys used once (a date or an order number in KEY). Tokens still grow
after it expired, since each is at least the server's clock in
microseconds: pick DURATION longer than any step back of that clock.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to run are
passed on to COMMAND's process group; the lock is released once COMMAND
has exited.

If the lock is lost while COMMAND runs (deleted or taken, or not renewed
before its TTL ran out because Redis could not be reached), run sends
SIGTERM to COMMAND's process group, SIGKILL after --grace to whatever is
left of it, and exits 79. It also exits 79 if it finds the lock gone when
COMMAND has exited.

If run itself is killed, even with SIGKILL, COMMAND is killed with
SIGKILL too (on Linux), and the lock expires after --ttl; the processes
COMMAND started are not, so a script should exec its last, long-running
program. Processes that COMMAND leaves running in the background when it
exits are not covered by the lock. COMMAND runs in the background as far
as a terminal is concerned: it cannot read from the terminal.

--log-format json makes run write, instead of its messages, one JSON
object a line to stderr for each thing it does, with the time, a level
and msg naming the thing, for a log collector: acquired (waited_ms,
attempts, handed_over, ttl_ms, fence with --fencing), skipped (reason
held or done), child_started (pid), signal_forwarded, renewal_failed,
lost (cause), child_killed (signal SIGTERM or SIGKILL), child_exited
(status, signal), released or release_failed, recorded (--once), error,
and last exit (status). No token is ever written. For example:
  {"time":"2026-12-02T02:15:00.412Z","level":"INFO","msg":"acquired","key":"backup",
   "waited_ms":1875,"hold":"lock","attempts":2,"handed_over":true,"ttl_ms":30000}
(on one line). The records of a set of locks have keys, the sorted keys,
instead of key. COMMAND's own output is not changed. docs/cli.md lists
every record and field.

Flags:

`

const runExamples = `
Examples:

  # In the same crontab on every host: one of them builds the report.
  locksmith run --key nightly-report -- /usr/local/bin/report --day yesterday

  # On Redis Cluster: the URL of any node will do; the others are spares.
  locksmith run --cluster --redis 'redis://10.0.0.1:7000?addr=10.0.0.2:7000' --key backup -- /usr/local/bin/backup

  # Wait up to 5 minutes for the lock rather than skipping the run.
  locksmith run --wait 5m --key migrate -- ./migrate.sh

  # Password from the environment; a skipped run is not a failure.
  REDIS_URL='rediss://:secret@redis.internal:6380/2' \
    locksmith run --skip-ok --key backup -- /usr/local/bin/backup

  # A pipeline as COMMAND; the script can log which run it is.
  locksmith run --key export -- sh -c 'echo "run $LOCKSMITH_TOKEN"; pg_dump db | gzip >/srv/db.gz'

  # Yesterday's report, once, from whichever host fires first; hosts that
  # fire later, or again, skip it for two days.
  locksmith run --once --done-ttl 48h --skip-ok --key "report:$(date -d yesterday +%F)" \
    -- /usr/local/bin/report --day yesterday

  # Move money between two accounts: both locks at once, or neither.
  locksmith run --wait 10s --key account:17 --key account:42 -- ./transfer 17 42 100

  # Pass the fencing token with the write; the store refuses a token smaller
  # than the largest it has seen. Single quotes: $LOCKSMITH_FENCE is set for
  # COMMAND, not for the shell that starts locksmith.
  locksmith run --fencing --key inventory -- sh -c \
    'curl -fsS -X PUT -H "Fencing-Token: $LOCKSMITH_FENCE" -T inventory.json https://store.internal/inventory'
`

const electIntro = `Usage: locksmith elect [flags] --name NAME [--value VALUE] -- COMMAND [ARGS...]
       locksmith elect [flags] --name NAME --observe [--json]

Run COMMAND on one host of several, the leader of the election NAME, and
have another host take over when it stops leading: the scheduler, the
outbox relay or the cache warmer of a fleet. Every host runs the same
elect; each is a candidate, and waits (campaigns) until it leads.

While it leads, elect runs COMMAND as run does: in a process group of its
own, with the election's NAME in LOCKSMITH_KEY, the term's token in
LOCKSMITH_TOKEN, its fencing token in LOCKSMITH_FENCE (larger than any
earlier leader's: see --fencing in 'locksmith help run') and VALUE in
LOCKSMITH_VALUE, and it renews leadership every third of --ttl. When
COMMAND exits, elect resigns, which hands leadership at once to the
candidate that has waited longest, prints one line to stderr and
campaigns again after a pause (100ms, doubling up to 5s while COMMAND
fails or leadership is lost). With --exit-with-command it resigns and
exits with COMMAND's status, or 128+N if signal N killed COMMAND, as run
does.

If leadership is lost while COMMAND runs (the key deleted or taken, or not
renewed before its TTL ran out because Redis could not be reached),
elect stops COMMAND exactly as run does: SIGTERM to its process group,
SIGKILL after --grace to whatever is left of it; then it campaigns
again, or with --exit-with-command exits 79. If elect itself is killed,
COMMAND is killed too (on Linux), and another candidate leads once
--ttl has run out.

SIGINT, SIGTERM, SIGHUP and SIGQUIT stop elect: while it campaigns, it
stops and exits 128+N for signal N; while COMMAND runs, the signal is
passed on to COMMAND's process group, and once COMMAND has exited elect
resigns and exits with COMMAND's status. SIGUSR1 and SIGUSR2 are passed on
to COMMAND while it runs, and otherwise ignored.

VALUE (default HOST:PID, the host's name and elect's process id; at most
4096 bytes) is what observers see of the leader. --observe runs no
COMMAND and campaigns for nothing: it prints the current leader, then one
line for each change (a new leader, or nobody leading), until SIGINT,
SIGTERM, SIGHUP or SIGQUIT, and then exits 0:
  leader "db1:4242" fence 1796005500123456
  no leader
With --json, each line is a JSON object:
  {"name":"scheduler","leader":true,"value":"db1:4242","fence":1796005500123456,"ttl_ms":29873}
  {"name":"scheduler","leader":false}
ttl_ms is what the leader's term had left when it was read. An observer
hears of a resignation or a new leader at once, and of a leader that died
when its TTL runs out; while Redis cannot be reached it prints nothing and
keeps trying.

Redis: a candidate that cannot reach Redis, or gets an error from it,
while campaigning prints one line to stderr and tries again after a pause
(100ms, doubling up to 5s); with --exit-with-command it exits 69, as run
does. elect --observe exits 69 if its first read of the leader fails. A
Redis user refused a command it needs (ACL) exits 69 either way.

--log-format json writes one JSON object a line to stderr, as run's
does (see 'locksmith help run'), with these records of a candidate:
elected (value, waited_ms, attempts, handed_over, ttl_ms, fence),
campaign_failed (error, pause_ms), term_lost (cause), resigned or
resign_failed, and campaigning (pause_ms) before the next campaign.

The election is a lock at PREFIX+NAME with fencing (see 'locksmith help
status'); Go programs using the library's Locker.Election with the same
prefix and name are candidates in the same election.

Flags:

`

const electExamples = `
Examples:

  # On every host of the fleet: one of them runs the scheduler, and
  # another takes over about 10s after its host dies.
  locksmith elect --name scheduler --ttl 10s -- /usr/local/bin/scheduler

  # Who leads, and each change from now on.
  locksmith elect --name scheduler --observe
  locksmith elect --name scheduler --observe --json | jq -r 'select(.leader) | .value'

  # Lead once: run the migration on one host, and exit with its status.
  locksmith elect --name migrate --exit-with-command -- ./migrate.sh

  # Pass the term's fencing token with each write (single quotes: the
  # variable is set for COMMAND, not for the shell that starts locksmith).
  locksmith elect --name relay --value "$(hostname):8080" -- sh -c \
    'exec /usr/local/bin/outbox-relay --fence "$LOCKSMITH_FENCE"'
`

const statusIntro = `Usage: locksmith status [flags] --key KEY [--json]
       locksmith status [flags] --key KEY --watch [--interval D] [--json]

Show whether the lock KEY is free or held, and if it is held the holder's
token and the time left before it expires unless renewed; how many
waiters (run --wait, about one per process) are queued for it; the last
fencing token issued for KEY (by run --fencing); and the record of a run
--once under KEY that succeeded: when, by which locksmith (host:pid),
under which token. status reads them all in one step and changes nothing.
For a semaphore (run --limit) it shows each permit held, with its token
and time left, and how many processes listen for its releases (waiting
for a permit); --json then prints
  {"key":"payments","redis_key":"locksmith:payments","kind":"semaphore",
   "holders":[{"token_mark":"9f0c2a1b3d","ttl_ms":27514}],"listening":1}
and for a read-write lock (the library's RWMutex) its readers, writer and
waiting writers:
  {"key":"cache","redis_key":"locksmith:cache","kind":"rwlock",
   "readers":[{"token_mark":"9f0c2a1b3d","ttl_ms":27514}],"waiting_writers":1}
It exits 0 whether the lock is free or held, and 69 if Redis cannot be
read or holds something at these keys that locksmith did not write.

--json prints one object, such as
  {"key":"backup","redis_key":"locksmith:backup","held":true,"token_mark":"9f0c2a1b3d","ttl_ms":27514,"queued":1}
or, after a run --once --fencing under KEY has succeeded,
  {"key":"report:2026-11-30","redis_key":"locksmith:report:2026-11-30","held":false,
   "fence":1796005500123456,"done":{"completed_at":"2026-11-30T02:25:03Z","by":"db1:4242","token_mark":"3c5e0f9a21"}}
(on one line). token_mark and ttl_ms are absent when the lock is free, and
ttl_ms is -1 for a key that has no expiry (one not set by locksmith);
fence, done and queued are absent when there are none. For a key held as
part of a set (run --key A --key B), the text says "is held by token
#3889cee5b4 as part of a set of 2 keys", and --json has "set_size":2;
every key of the set shows the same token mark.

--watch follows KEY until SIGINT, SIGTERM, SIGHUP or SIGQUIT, and then
exits 0: it prints
the state, then a line each time it changes (holder, waiters, fence,
record; not the time left, which every renewal changes), starting with
the time:
  2026-12-02T14:30:05.120Z lock "backup" (Redis key "locksmith:backup") is held by token #9f0c2a1b3d, 29.9s left
  2026-12-02T14:31:12.004Z lock "backup" (Redis key "locksmith:backup") is free
With --json each line is the object above with a time field first. It
reads KEY every --interval and, for a lock or a read-write lock, also as
soon as a release or a handoff is announced on KEY's channel (a lock
taken while free is seen at the next read; a semaphore is only polled,
since a listener on its channel would count as a waiting process). It
exits 69 if its first read fails; after
that, while Redis cannot be read, it prints one line to stderr, keeps
trying every --interval, and says when Redis answers again, printing
the state again then.

Flags:

`

const statusExamples = `
Examples:

  locksmith status --key nightly-report
  locksmith status --key nightly-report --json | jq .held

  # Through Sentinel: the master that the sentinels monitor as "mymaster",
  # whose password is secret.
  REDIS_URL='redis://sentinel1:26379?master_name=mymaster&addr=sentinel2:26379&password=secret' \
    locksmith status --key nightly-report

  # When did the run --once for yesterday's report succeed, and where?
  locksmith status --key "report:$(date -d yesterday +%F)" --json | jq .done

  # Who holds the backup lock, from now on, checked every 5 seconds.
  locksmith status --key nightly-backup --watch --interval 5s
`

const lsIntro = `Usage: locksmith ls [flags] [--prefix PREFIX] [--limit N] [--json]

List the locks held under PREFIX (--prefix, default "locksmith:"), sorted
by key: for each, its kind (lock; election, a lock that candidates
campaign for; semaphore, from run --limit; rwlock, the library's
RWMutex), how many hold it, the leader's value for an election, the time
left of the hold that expires first, the last fencing token, and the
waiters: queued for a lock or an election, listening for a semaphore's
releases ("?" when the Redis user may not count them), writers waiting
for a read-write lock. ls never prints a token. A key held as part of a
set (run --key A --key B) shows, as its HOLDER, the mark of the set's
token and the number of keys in the set: "#3889cee5b4 (set of 2)" on
each of its keys.

ls finds the keys with SCAN MATCH PREFIX* (on every master of a Redis
Cluster), at most 100 calls of COUNT 1000 per server, skips the keys
locksmith keeps beside each lock (those whose name after PREFIX starts
with "~": see the library's Locker.Keys and docs/acl.md) and the
keys that hold neither a string nor a sorted set, and reads each lock as
status does. PREFIX must be the one the locks were taken with. It lists
at most --limit locks, the first by key of the names it found; when it
stops short it says so on stderr, and --json gives "complete":false.
It exits 0, or 69 if Redis cannot be read or a key under PREFIX holds
something that locksmith did not write there.

--json prints one object, such as
  {"prefix":"locksmith:","locks":[
   {"key":"backup","redis_key":"locksmith:backup","kind":"lock","holders":1,"ttl_ms":27514,"waiters":1},
   {"key":"cache","redis_key":"locksmith:cache","kind":"rwlock","holders":3,"mode":"read","ttl_ms":2980},
   {"key":"scheduler","redis_key":"locksmith:scheduler","kind":"election","holder":"db1:4242",
    "holders":1,"ttl_ms":9650,"fence":1796005500123456}],"complete":true}
(on one line). holder, mode, fence and waiters are absent when they do
not apply or are none; ttl_ms is -1 for a lock key without expiry. A key
held as part of a set also has "set_size" and "token_mark", the same on
every key of the set.

Flags:

`

const lsExamples = `
Examples:

  locksmith ls
  locksmith ls --prefix jobs: --limit 50
  locksmith ls --json | jq -r '.locks[] | select(.kind == "election") | "\(.key) \(.holder)"'
`

const releaseIntro = `Usage: locksmith release [flags] --key KEY --force

Delete the lock KEY, whoever holds it: the operator's escape hatch when a
holder is stuck. release prints what it deleted (the holder's token and the
time that was left); without --force it deletes nothing and exits 64.

The holder is not asked. A locksmith run holding the lock finds out at its
next renewal, within a third of its TTL, and stops its COMMAND as for any
lost lock; a program using the Go library sees its lease context cancelled
with ErrLockLost. Until then, both may run. Waiters (run --wait, or the
library's Obtain with a retry strategy) are told of the release, as of any
release, and try at once; a user whose ACL grants no rights on the lock's
channels still deletes the lock, and its waiters notice at their next
attempt.

A lock held as part of a set (run with several --key, or the library's
ObtainAll) is deleted alone: release says so, and the set's other keys
stay held by the same holder, which finds out at its next renewal and
then releases them, or until they expire.

Flags:

`

const releaseExamples = `
Examples:

  locksmith status --key nightly-report
  locksmith release --key nightly-report --force
`

// commandHelp returns the help of each command, flags included.
var commandHelp = map[string]func() string{
	"run": func() string {
		return helpText(runIntro, runFlagSet(new(runFlags)), runExamples)
	},
	"elect": func() string {
		return helpText(electIntro, electFlagSet(new(electFlags)), electExamples)
	},
	"status": func() string {
		return helpText(statusIntro, statusFlagSet(new(statusFlags)), statusExamples)
	},
	"release": func() string {
		return helpText(releaseIntro, releaseFlagSet(new(releaseFlags)), releaseExamples)
	},
	"ls": func() string {
		return helpText(lsIntro, lsFlagSet(new(lsFlags)), lsExamples)
	},
}

func helpText(intro string, set *flag.FlagSet, examples string) string {
	return strings.Join([]string{intro, formatFlags(set), examples}, "")
}
