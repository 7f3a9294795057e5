/**
 * The configuration schema (SPEC §10): one object, defaults beside each key,
 * unknown keys refused. `config.json` in the data dir is validated against it
 * at start; every problem is reported at once.
 */
import Type, { type Static } from 'typebox'

const Bool = (d: boolean) => Type.Boolean({ default: d })

export const Argon2Schema = Type.Object(
  {
    memory_kib: Type.Integer({ minimum: 8, maximum: 4194304, default: 19456 }),
    time_cost: Type.Integer({ minimum: 1, maximum: 100, default: 2 }),
    parallelism: Type.Integer({ minimum: 1, maximum: 64, default: 1 }),
    max_concurrent_hashes: Type.Integer({ minimum: 1, maximum: 64, default: 4 }),
  },
  { additionalProperties: false, default: {} },
)

export const NtfySchema = Type.Object(
  {
    topic: Type.String({ default: '', maxLength: 256 }),
    base_url: Type.String({ default: 'https://ntfy.sh', maxLength: 2048 }),
    enabled_events: Type.Array(Type.String(), { default: [] }),
    api_token: Type.String({ default: '', maxLength: 1024 }),
  },
  { additionalProperties: false, default: {} },
)

/** The audit log (audit/audit-log.ts): events older than `retention_days` or beyond the newest `max_events` are removed. */
export const AuditSchema = Type.Object(
  {
    retention_days: Type.Integer({ minimum: 1, maximum: 3650, default: 90 }),
    max_events: Type.Integer({ minimum: 1000, maximum: 10000000, default: 100000 }),
  },
  { additionalProperties: false, default: {} },
)

export const ModelDownloadSchema = Type.Object(
  {
    civitai_base_url: Type.String({ default: 'https://civitai.com' }),
    huggingface_base_url: Type.String({ default: 'https://huggingface.co' }),
    max_active_total: Type.Integer({ minimum: 1, maximum: 32, default: 3 }),
    max_active_per_source: Type.Integer({ minimum: 1, maximum: 32, default: 2 }),
    /** redirects (and base URLs) may reach loopback, private and link-local hosts, over http too: test stand-ins only */
    allow_private_hosts: Bool(false),
    /** a transfer that receives nothing for this long is aborted and retried */
    stall_timeout_seconds: Type.Integer({ minimum: 1, maximum: 3600, default: 60 }),
    /** how many times a failed transfer (network, stall, 429, 5xx) is tried again before the job fails */
    max_retries: Type.Integer({ minimum: 0, maximum: 20, default: 4 }),
    /** the first retry's delay; each next one doubles (capped at 5 minutes) */
    retry_base_seconds: Type.Number({ minimum: 0, maximum: 600, default: 5 }),
  },
  { additionalProperties: false, default: {} },
)

/** A class score (0..1) at or above which the detector calls an image NSFW (nsfw/classifier.ts). */
const Threshold = (d: number) => Type.Number({ minimum: 0, maximum: 1.01, default: d })

/**
 * The content-safety policy (nsfw/, SPEC §11). Off by default: its classifier's packages are
 * installed only when `enabled` is set (sidecar/nsfw-classifier/, docs/decisions.md).
 */
export const NsfwSchema = Type.Object(
  {
    enabled: Bool(false),
    /** `nsfwjs`: the bundled MobileNetV2 model; `test`: the deterministic test classifier (refused unless AUTHSVC_NSFW_TEST_CLASSIFIER=1) */
    classifier: Type.Union([Type.Literal('nsfwjs'), Type.Literal('test')], { default: 'nsfwjs' }),
    /** an image is NSFW when any class reaches its threshold (1.01: never) */
    thresholds: Type.Object(
      {
        Porn: Threshold(0.6),
        Hentai: Threshold(0.6),
        Sexy: Threshold(0.8),
      },
      { additionalProperties: false, default: {} },
    ),
    /**
     * how long a /view of an image not classified yet waits for its classification (then: blocked for
     * sfw_check users); keep it under the plugin's decision timeout (AUTHSVC_DECISION_TIMEOUT_MS, 2000)
     */
    view_deadline_ms: Type.Integer({ minimum: 50, maximum: 30000, default: 1500 }),
    /** how long a preview frame of an sfw_check user's prompt may wait for its classification (then: withheld) */
    preview_deadline_ms: Type.Integer({ minimum: 50, maximum: 10000, default: 1000 }),
    /** images waiting for the classifier at most; beyond, new outputs wait for a scan and /view classifies on demand */
    queue_max: Type.Integer({ minimum: 1, maximum: 100000, default: 1000 }),
  },
  { additionalProperties: false, default: {} },
)

/**
 * Where API tokens are kept (SPEC §5.4 token-storage-config): `users` (the default) is the store
 * the users are in; otherwise a store of their own, or the legacy JSON file. An empty path is the
 * default in the data dir (sqlite: the users' `authsvc.sqlite`; json: `authsvc_tokens.json`).
 */
export const TokenStoreSchema = Type.Object(
  {
    backend: Type.Union([Type.Literal('users'), Type.Literal('sqlite'), Type.Literal('postgres'), Type.Literal('redis'), Type.Literal('json')], { default: 'users' }),
    sqlite_path: Type.String({ default: '', maxLength: 4096 }),
    postgres_url: Type.String({ default: '', maxLength: 2048 }),
    redis_url: Type.String({ default: '', maxLength: 2048 }),
    json_path: Type.String({ default: '', maxLength: 4096 }),
  },
  { additionalProperties: false, default: {} },
)

export const StoreSchema = Type.Object(
  {
    backend: Type.Union([Type.Literal('sqlite'), Type.Literal('postgres'), Type.Literal('redis')], { default: 'sqlite' }),
    sqlite_path: Type.String({ default: '' }),
    postgres_url: Type.String({ default: '' }),
    redis_url: Type.String({ default: '' }),
    encryption_level: Type.Union([Type.Literal('fields'), Type.Literal('all')], { default: 'fields' }),
    tokens: TokenStoreSchema,
  },
  { additionalProperties: false, default: {} },
)

export const UpdateCheckSchema = Type.Object(
  {
    /** where the latest version is read (docs/decisions.md "Update status"); '' = offline, never asked */
    url: Type.String({ default: '', maxLength: 2048 }),
  },
  { additionalProperties: false, default: {} },
)

const Cidr = Type.String({ minLength: 2, maxLength: 64 })

export const ConfigSchema = Type.Object(
  {
    require_auth_for_remote_api: Bool(true),
    local_network_cidrs: Type.Array(Cidr, { default: ['127.0.0.0/8', '::1/128'] }),
    trusted_proxies: Type.Array(Cidr, { default: [] }),
    local_anonymous_role: Type.Union([Type.String({ minLength: 1, maxLength: 64 }), Type.Null()], { default: null }),
    seperate_users: Bool(true),
    force_https: Bool(false),
    allow_guest_jwt: Bool(false),
    access_token_expiration_hours: Type.Number({ exclusiveMinimum: 0, maximum: 8760, default: 12 }),
    session_idle_minutes: Type.Number({ minimum: 0, maximum: 525600, default: 60 }),
    max_token_expiration_hours: Type.Number({ exclusiveMinimum: 0, maximum: 87600, default: 8760 }),
    max_json_body_bytes: Type.Integer({ minimum: 1024, maximum: 33554432, default: 8388608 }),
    /** Other custom nodes' routes (canonical patterns, or a static folder's prefix) that only admins may use. */
    admin_route_patterns: Type.Array(Type.String({ pattern: '^/' }), { default: [] }),
    /**
     * Other custom nodes' routes (canonical patterns, or a static folder's prefix) that serve files
     * users put on the host: their answers carry the inert headers (access/host-routes.ts).
     * Never `/` (the frontend's page would be a sandbox). The default names VideoHelperSuite's
     * viewers, which serve input, output and temp files inline.
     */
    inert_route_patterns: Type.Array(Type.String({ pattern: '^/(?!api/?$)[^/]' }), { default: ['/vhs/viewvideo', '/viewvideo', '/vhs/viewaudio'] }),
    /**
     * Origins (besides ComfyUI's own) whose pages may show ComfyUI in a frame, such as a portal that
     * embeds it; `*` lets any page. Sent as `Content-Security-Policy: frame-ancestors` with the
     * host's pages (access/host-routes.ts framePolicy).
     */
    frame_ancestors: Type.Array(Type.String({ pattern: "^(\\*|https?://[^/\\s;,'*]+)$", maxLength: 256 }), { default: [] }),
    argon2: Argon2Schema,
    ntfy: NtfySchema,
    audit: AuditSchema,
    model_download: ModelDownloadSchema,
    nsfw: NsfwSchema,
    store: StoreSchema,
    update_check: UpdateCheckSchema,
  },
  { additionalProperties: false },
)

export type Config = Static<typeof ConfigSchema>
