"""The tables, as SQLAlchemy Core metadata.

This is the shape the stores query; the migrations in ``migrations/versions`` create it and
must be kept in step with it (a test compares the two). Times are epoch seconds as doubles;
JSON columns hold plain JSON values.
"""

from __future__ import annotations

import sqlalchemy as sa

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

IN_PROGRESS = "state IN ('queued', 'building', 'starting', 'canary')"
"""A deployment's in-progress states (``platform.deploy.states.IN_PROGRESS``), as SQL."""

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""BIGINT on PostgreSQL; INTEGER on SQLite, where only INTEGER PRIMARY KEY autoincrements."""

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("tenant", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("protocol_version", sa.String, nullable=False),
    sa.Column("client_info", sa.JSON, nullable=False),
    sa.Column("client_capabilities", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("last_active", sa.Double, nullable=False, index=True),
    sa.Column("log_level", sa.String, nullable=False),
    sa.Column("initialized", sa.Boolean, nullable=False),
    sa.Column("subscriptions", sa.JSON, nullable=False),  # sorted list of URIs
    sa.Column("token_id", sa.String, nullable=True, index=True),  # migration 0006
    sa.Index(None, "tenant", "user", "last_active"),  # per-user caps (migration 0006)
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("task_id", sa.String, primary_key=True),
    sa.Column("tenant", sa.String, nullable=False),
    sa.Column("user", sa.String, nullable=False),
    sa.Column("session_id", sa.String, nullable=False),
    sa.Column("status", sa.String, nullable=False, index=True),
    sa.Column("status_message", sa.Text, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("ttl_ms", sa.BigInteger, nullable=True),
    sa.Column("poll_interval_ms", sa.Integer, nullable=False),
    sa.Column("method", sa.String, nullable=False),
    sa.Column("params", sa.JSON, nullable=False),
    sa.Column("instance_id", sa.String, nullable=False),
    # none_as_null: Python None is SQL NULL, not the JSON text 'null'
    sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("error", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("progress_token", sa.JSON(none_as_null=True), nullable=True),
    sa.Index(None, "tenant", "user", "created_at"),
)

task_inputs = sa.Table(  # migration 0018: a stateless task's input requests and answers
    "task_inputs",
    metadata,
    sa.Column(
        "task_id", sa.String, sa.ForeignKey("tasks.task_id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("key", sa.String, primary_key=True),  # unique over the task's life
    sa.Column("request", sa.JSON, nullable=False),  # {"method", "params"}
    sa.Column("response", sa.JSON(none_as_null=True), nullable=True),  # the client's result
    sa.Column("asked_at", sa.Double, nullable=False),
    sa.Column("answered_at", sa.Double, nullable=True),
)

session_events = sa.Table(
    "session_events",
    metadata,
    sa.Column("seq", Seq, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String, nullable=False),
    sa.Column("stream", sa.String, nullable=False),
    sa.Column("payload", sa.Text, nullable=False),  # the JSON-RPC message, UTF-8 text
    sa.Column("created_at", sa.Double, nullable=False, index=True),
    sa.Index(None, "session_id", "stream", "seq"),
    # AUTOINCREMENT: SQLite never reuses a seq, even after the newest rows are deleted
    sqlite_autoincrement=True,
)

# -- identity and authorization (migration 0002) -------------------------------------------

tenants = sa.Table(
    "tenants",
    metadata,
    sa.Column("id", sa.String, primary_key=True),  # a slug, e.g. "acme"
    sa.Column("name", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    # migration 0005: a disabled tenant's tokens are refused and nobody of it signs in
    sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("tenant_id", sa.String, sa.ForeignKey("tenants.id"), nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("password_hash", sa.String, nullable=True),  # argon2; None: cannot log in
    sa.Column("role", sa.String, nullable=False),  # tenant role: admin | member
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("disabled", sa.Boolean, nullable=False),
    sa.UniqueConstraint("tenant_id", "name"),
)

oauth_clients = sa.Table(
    "oauth_clients",
    metadata,
    sa.Column("client_id", sa.String, primary_key=True),
    sa.Column("secret_hash", sa.String, nullable=True),  # confidential clients only
    sa.Column("name", sa.String, nullable=True),
    sa.Column("kind", sa.String, nullable=False),  # dcr | cimd | static
    sa.Column("redirect_uris", sa.JSON, nullable=False),
    sa.Column("grant_types", sa.JSON, nullable=False),
    sa.Column("auth_method", sa.String, nullable=False),  # none | client_secret_basic | _post
    sa.Column("scope", sa.String, nullable=True),
    sa.Column("tenant_id", sa.String, nullable=True),  # client_credentials: the tenant acted in
    sa.Column("metadata", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),  # a cached CIMD document's expiry
    # the first authorization code issued to it; a dcr client without one expires (0006)
    sa.Column("used_at", sa.Double, nullable=True),
    # an app's own client (manage_oauth_client, migration 0009); NULL for AppDeck's clients
    sa.Column("app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), nullable=True),
    sa.Index(None, "app_id"),
)

auth_codes = sa.Table(
    "auth_codes",
    metadata,
    sa.Column("code_hash", sa.String, primary_key=True),
    sa.Column("client_id", sa.String, nullable=False),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("user_id", sa.String, nullable=False),
    sa.Column("redirect_uri", sa.String, nullable=False),
    sa.Column("scope", sa.String, nullable=False),
    sa.Column("resource", sa.String, nullable=True),
    sa.Column("code_challenge", sa.String, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("used", sa.Boolean, nullable=False),
)

refresh_tokens = sa.Table(
    "refresh_tokens",
    metadata,
    sa.Column("token_hash", sa.String, primary_key=True),
    sa.Column("family_id", sa.String, nullable=False, index=True),
    sa.Column("client_id", sa.String, nullable=False),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("user_id", sa.String, nullable=False),
    sa.Column("scope", sa.String, nullable=False),
    sa.Column("resource", sa.String, nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("used_at", sa.Double, nullable=True),  # rotated: a replay revokes the family
    sa.Column("revoked", sa.Boolean, nullable=False),
)

revoked_tokens = sa.Table(
    "revoked_tokens",
    metadata,
    sa.Column("jti", sa.String, primary_key=True),
    sa.Column("expires_at", sa.Double, nullable=False, index=True),
)

personal_tokens = sa.Table(
    "personal_tokens",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("token_hash", sa.String, nullable=False, unique=True),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("user_id", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("scopes", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.Column("last_used_at", sa.Double, nullable=True),
    sa.Column("revoked_at", sa.Double, nullable=True),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", Seq, primary_key=True, autoincrement=True),
    sa.Column("ts", sa.Double, nullable=False),  # no index: ids are in time order already
    sa.Column("tenant_id", sa.String, nullable=True),
    sa.Column("user_id", sa.String, nullable=True),
    sa.Column("client_id", sa.String, nullable=True),
    sa.Column("event", sa.String, nullable=False),  # tool_call | refused | token_issued | ...
    sa.Column("method", sa.String, nullable=True),
    sa.Column("tool", sa.String, nullable=True),
    sa.Column("action", sa.String, nullable=True),
    sa.Column("app_id", sa.BigInteger, nullable=True),
    sa.Column("outcome", sa.String, nullable=False),  # ok | error | denied
    sa.Column("status", sa.Integer, nullable=True),  # HTTP status, when one applies
    sa.Column("duration_ms", sa.Double, nullable=True),
    sa.Column("request_id", sa.String, nullable=True),
    sa.Column("detail", sa.JSON(none_as_null=True), nullable=True),
    # no AUTOINCREMENT: ids only need to grow while rows are appended, and the extra
    # sqlite_sequence write costs ~1 µs on every tools/call
    # the console's audit page (migration 0020): one tenant's rows, newest first, by keyset;
    # written by the audit thread in batches, off the event loop
    sa.Index("ix_audit_log_tenant_id_id", "tenant_id", "id"),
)

# -- apps (migration 0003) ------------------------------------------------------------------

apps = sa.Table(
    "apps",
    metadata,
    sa.Column("id", Seq, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("description", sa.Text, nullable=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("spec_version", sa.Integer, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("needs_restart", sa.Boolean, nullable=False),  # env changed since the last deploy
    # operating an app (migration 0015): stopped (0 instances, 503 "stopped"); a stop or start
    # the operator's CLI asked for ("stop" | "start"), applied by the server's next sweep
    sa.Column("stopped", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("run_intent", sa.String, nullable=True),
    sa.UniqueConstraint("tenant_id", "name"),
    sqlite_autoincrement=True,  # an app id is never reused after a delete
)

app_members = sa.Table(
    "app_members",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("user_id", sa.String, primary_key=True),
    sa.Column("role", sa.String, nullable=False),  # owner | admin | developer | viewer
    sa.Column("granted_by", sa.String, nullable=False),
    sa.Column("granted_at", sa.Double, nullable=False),
)

app_env = sa.Table(
    "app_env",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),  # encrypted (Fernet), never the plain value
    sa.Column("secret", sa.Boolean, nullable=False),
    sa.Column("updated_by", sa.String, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

# -- deployments (migration 0004) -----------------------------------------------------------

deployments = sa.Table(
    "deployments",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("state", sa.String, nullable=False, index=True),
    sa.Column("strategy", sa.String, nullable=False),
    sa.Column("spec", sa.JSON, nullable=False),  # frozen at creation
    sa.Column("env", sa.Text, nullable=False),  # frozen env, encrypted as one JSON object
    sa.Column("source", sa.JSON, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("status_message", sa.Text, nullable=True),
    sa.Column("steps", sa.JSON, nullable=False),  # [{at, state, message}] the history
    sa.Column("previous", sa.Integer, nullable=True),  # the live deployment it replaces
    sa.Column("traffic", sa.Integer, nullable=False),  # percent of ingress traffic it gets
    sa.Column("instance_id", sa.String, nullable=True),  # the server process driving it
    # one deployment in progress per app, whatever the replicas race (migration 0012)
    sa.Index(
        "uq_deployments_in_progress",
        "app_id",
        unique=True,
        postgresql_where=sa.text(IN_PROGRESS),
        sqlite_where=sa.text(IN_PROGRESS),
    ),
)
repo_connections = sa.Table(
    "repo_connections",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("url", sa.Text, nullable=False),  # as connected, never with credentials
    sa.Column("token", sa.Text, nullable=True),  # sealed (Fernet), never the plain token
    sa.Column("branch", sa.String, nullable=False),
    sa.Column("webhook_secret", sa.Text, nullable=False),  # sealed: HMAC needs the key itself
    sa.Column("auto_deploy", sa.Boolean, nullable=False),
    sa.Column("last_commit", sa.String, nullable=True),
    sa.Column("last_message", sa.Text, nullable=True),
    sa.Column("last_push_at", sa.Double, nullable=True),
    sa.Column("connected_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    sa.Column("poll_seconds", sa.Integer, nullable=True),  # polling when set (migration 0010)
    sa.Column("polled_at", sa.Double, nullable=True),
)

ci_configs = sa.Table(  # manage_ci (migration 0008)
    "ci_configs",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("branch", sa.String, nullable=True),  # NULL: the connected repository's branch
    sa.Column("test_command", sa.Text, nullable=False),
    sa.Column("auto_deploy", sa.Boolean, nullable=False),
    sa.Column("strategy", sa.String, nullable=True),  # NULL: the spec's strategy
    sa.Column("require_green", sa.Boolean, nullable=False),
    sa.Column("timeout_seconds", sa.Integer, nullable=False),
    sa.Column("updated_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

ci_runs = sa.Table(  # one run of an app's test command at a commit (migration 0008)
    "ci_runs",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("number", sa.Integer, primary_key=True),
    sa.Column("commit", sa.String, nullable=False),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("branch", sa.String, nullable=False),
    sa.Column("trigger", sa.String, nullable=False),  # push | poll | manual
    sa.Column("state", sa.String, nullable=False, index=True),
    sa.Column("status_message", sa.Text, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("log", sa.Text, nullable=False),  # bounded; masked like app logs
    sa.Column("deployment", sa.Integer, nullable=True),  # the deploy a green run started
    sa.Column("task_id", sa.String, nullable=True),
    sa.Column("created_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("started_at", sa.Double, nullable=True),
    sa.Column("finished_at", sa.Double, nullable=True),
    sa.Column("instance_id", sa.String, nullable=True),  # the server process running it
)

api_documents = sa.Table(  # discover_apis: each discovered OpenAPI document (migration 0011)
    "api_documents",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("version", sa.Integer, primary_key=True),  # per app, 1, 2, ...
    sa.Column("source", sa.String, nullable=False),  # where it was found (live path, repo file)
    sa.Column("title", sa.String, nullable=False),
    sa.Column("api_version", sa.String, nullable=False),  # info.version
    sa.Column("openapi_version", sa.String, nullable=False),
    sa.Column("operations", sa.Integer, nullable=False),
    sa.Column("digest", sa.String, nullable=False),  # sha256 of the canonical document
    sa.Column("document", sa.Text, nullable=False),  # canonical JSON, bounded
    sa.Column("changes", sa.JSON, nullable=False),  # {added, removed, changed} since the last
    sa.Column("discovered_by", sa.String, nullable=False),
    sa.Column("discovered_at", sa.Double, nullable=False),
)

api_keys = sa.Table(  # manage_api_key: keys the ingress checks for an app (migration 0011)
    "api_keys",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column(
        "app_id",
        sa.BigInteger,
        sa.ForeignKey("apps.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("prefix", sa.String, nullable=False),  # shown in lists; not a secret
    sa.Column("key_hash", sa.String, nullable=False, unique=True),
    sa.Column("scopes", sa.JSON, nullable=False),
    sa.Column("created_by", sa.String, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=True),
    sa.Column("revoked_at", sa.Double, nullable=True),
    sa.Column("last_used_at", sa.Double, nullable=True),
    sa.Column("rotated_from", sa.String, nullable=True),  # the key this one replaced
)

# -- replicas behind one URL (migration 0012) ---------------------------------------------

replicas = sa.Table(  # each running server process; heartbeat on the database's clock
    "replicas",
    metadata,
    sa.Column("instance_id", sa.String, primary_key=True),
    sa.Column("started_at", sa.Double, nullable=False),
    sa.Column("heartbeat_at", sa.Double, nullable=False),
)

app_locks = sa.Table(  # one deploy, rollback or restart of an app at a time, cluster-wide
    "app_locks",
    metadata,
    sa.Column("app_id", sa.BigInteger, primary_key=True),
    sa.Column("holder", sa.String, nullable=False),  # instance id (+ what holds it)
    sa.Column("fence", sa.BigInteger, nullable=False),  # +1 on every takeover
    sa.Column("expires_at", sa.Double, nullable=False),
)

consent_requests = sa.Table(  # /authorize waiting for the user's answer (any replica posts)
    "consent_requests",
    metadata,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("body", sa.JSON, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False, index=True),
)

signing_keys = sa.Table(  # the embedded OAuth server's keys, sealed with the secret key
    "signing_keys",
    metadata,
    sa.Column("kid", sa.String, primary_key=True),
    sa.Column("sealed_jwk", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

# -- webhook deliveries already taken, against replays (migration 0013) -------------------
webhook_deliveries = sa.Table(
    "webhook_deliveries",
    metadata,
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("digest", sa.String(64), primary_key=True),  # sha256 of the body, hex
    sa.Column("delivery", sa.String(100), nullable=True),  # X-GitHub-Delivery, when sent
    sa.Column("received_at", sa.Double, nullable=False, index=True),
    sa.Index("uq_webhook_deliveries_app_id_delivery", "app_id", "delivery", unique=True),
)

# -- automatic TLS (migration 0016): the ACME account, certificates, pending challenges -----
# Keys are sealed with the platform's Sealer; every replica reads the same rows.
tls_accounts = sa.Table(  # one ACME account per directory URL (a new CA: a new account)
    "tls_accounts",
    metadata,
    sa.Column("directory", sa.String(2048), primary_key=True),
    sa.Column("key_sealed", sa.Text, nullable=False),  # the account key (PEM), sealed
    sa.Column("uri", sa.String(2048), nullable=True),  # the account URL once registered
    sa.Column("created_at", sa.Double, nullable=False),
)

tls_certificates = sa.Table(  # one row per certificate the platform wants (or serves)
    "tls_certificates",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),  # ingress.certs.NAME
    sa.Column("hostnames", sa.JSON, nullable=False),  # its SANs, lower case
    sa.Column("purpose", sa.String(16), nullable=False),  # app | domain | control
    sa.Column("tenant_id", sa.String, nullable=True),  # whose orders count (rate limit)
    sa.Column("app_id", sa.BigInteger, nullable=True),
    sa.Column("state", sa.String(16), nullable=False),  # none | pending | issued | failed
    sa.Column("chain_sealed", sa.Text, nullable=True),
    sa.Column("key_sealed", sa.Text, nullable=True),
    sa.Column("issuer", sa.String(256), nullable=True),
    sa.Column("not_before", sa.Double, nullable=True),
    sa.Column("not_after", sa.Double, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False),  # failures in a row
    sa.Column("next_try", sa.Double, nullable=False, index=True),  # renewal or retry time
    sa.Column("holder", sa.String(200), nullable=True),  # the replica ordering it
    sa.Column("held_until", sa.Double, nullable=False),  # database clock
    sa.Column("updated_at", sa.Double, nullable=False),
)

tls_orders = sa.Table(  # orders sent to the CA: the per-tenant hourly rate limit reads it
    "tls_orders",
    metadata,
    sa.Column("id", Seq, primary_key=True, autoincrement=True),
    sa.Column("tenant_id", sa.String, nullable=True, index=True),
    sa.Column("at", sa.Double, nullable=False, index=True),
)

tls_challenges = sa.Table(  # HTTP-01 answers while an order is pending; every replica serves
    "tls_challenges",
    metadata,
    sa.Column("token", sa.String(128), primary_key=True),
    sa.Column("key_authorization", sa.String(260), nullable=False),
    sa.Column("certificate", sa.String(128), nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False, index=True),
)

tls_challenge_acks = sa.Table(  # which replica's data plane serves a challenge already
    "tls_challenge_acks",
    metadata,
    sa.Column("token", sa.String(128), primary_key=True),
    sa.Column("replica", sa.String(200), primary_key=True),
)

# -- custom domains (migration 0015): one app holds a hostname, platform-wide ---------------
app_domains = sa.Table(
    "app_domains",
    metadata,
    sa.Column("host", sa.String(253), primary_key=True),  # the unique key: one holder
    sa.Column(
        "app_id", sa.BigInteger, sa.ForeignKey("apps.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("state", sa.String(16), nullable=False),  # pending | verified
    sa.Column("method", sa.String(16), nullable=True),  # txt | acme (how it was proved)
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("verified_at", sa.Double, nullable=True),
    sa.Column("checked_at", sa.Double, nullable=True),  # the last TXT lookup
    sa.Column("last_error", sa.String(300), nullable=True),  # what that lookup found
    sa.Column("failing_since", sa.Double, nullable=True),  # a verified TXT proof gone since
    sa.Index("ix_app_domains_app_id", "app_id"),
)

# -- console sessions (migration 0019): a browser signed in to /console ---------------------
console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),  # a public handle (lists, revocation)
    sa.Column("secret_hash", sa.String(64), nullable=False, unique=True),  # sha256 of the cookie
    sa.Column("tenant_id", sa.String, nullable=False),
    sa.Column("user_id", sa.String, nullable=False),
    sa.Column("csrf", sa.String(64), nullable=False),  # every form carries it
    sa.Column("ip", sa.String(64), nullable=True),
    sa.Column("user_agent", sa.String(200), nullable=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("last_seen", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False, index=True),
    sa.Index("ix_console_sessions_tenant_id_user_id", "tenant_id", "user_id"),
)
