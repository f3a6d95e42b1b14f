import type { Dispatcher } from 'undici';
import { StoreError, type ErrorContext } from '../util/errors.js';
import { silentLogger, type Logger } from '../util/logger.js';
import { AgentPool } from './agent-pool.js';
import { Authorizer } from './authorizer.js';
import type { CredentialProvider } from './credentials.js';
import type { Endpoint } from './hosts.js';
import {
  backoffMs,
  isRetryableNetworkError,
  isRetryableStatus,
  isTlsFailure,
  networkErrorCode,
  parseRetryAfter,
  type RetryPolicy,
} from './retry.js';
import { abortedError, linkSignals, sleep } from '../util/abort.js';
import { sendAttempt, type AttemptDeps } from './request-attempt.js';
import { dump } from './response-body.js';
import { AttemptTimeout } from './signals.js';

// Reading answers lives in response-body.ts; re-exported for the registry's readers.
export { dump, readBody, statusError } from './response-body.js';

export type Headers = Record<string, string | string[] | undefined>;

/** A response whose body the consumer must read or dump. */
export interface Response {
  status: number;
  headers: Headers;
  body: Dispatcher.ResponseData['body'];
  /** Final URL after redirects. */
  url: URL;
  /** Abort signal of this attempt (body reads honour it). */
  signal: AbortSignal;
}

export interface RequestSpec {
  ep: Endpoint;
  /** Path below `/v2/<repository>/`, e.g. `blobs/sha256:...`. */
  path: string;
  method?: 'GET' | 'HEAD';
  headers?: Record<string, string>;
  /** Image reference (credential lookup, error context). */
  ref: string;
  /** What is fetched, for messages: 'manifest', 'blob', 'config'. */
  what: string;
  signal?: AbortSignal;
  /** Overall budget in ms for all attempts and waits. */
  deadlineMs: number;
  context?: ErrorContext;
  /** Override the policy's retries (a mirror with a host behind it fails over instead of waiting). */
  maxRetries?: number;
}

export interface TransportOptions {
  credentials?: CredentialProvider;
  retry: RetryPolicy;
  /** Per-attempt timeout when the endpoint sets none (Go: `[resolver] request_timeout_sec` 30). */
  requestTimeoutMs: number;
  logger?: Logger;
  userAgent?: string;
  maxRedirects?: number;
}

/**
 * Everything that touches HTTP, by job: keep-alive pools per TLS configuration (agent-pool.ts),
 * one attempt with Authorization, its single retry on 401 and redirects (request-attempt.ts), and
 * here the retries with backoff on network errors/429/5xx honouring Retry-After, and deadlines
 * (per attempt and overall).
 */
export class Transport {
  readonly authorizer: Authorizer;
  private readonly agents = new AgentPool();
  private readonly attemptDeps: AttemptDeps;
  private readonly logger: Logger;
  private readonly userAgent: string;
  /** requests sent (all attempts, redirects included) */
  requests = 0;

  constructor(private readonly opts: TransportOptions) {
    this.logger = opts.logger ?? silentLogger;
    this.userAgent = opts.userAgent ?? 'stargz-store-ts';
    this.authorizer = new Authorizer(
      opts.credentials,
      (ep) => this.dispatcher(ep),
      this.logger,
      this.userAgent,
      opts.requestTimeoutMs,
    );
    this.attemptDeps = {
      authorizer: this.authorizer,
      dispatcher: (ep, forHead) => this.dispatcher(ep, forHead),
      userAgent: this.userAgent,
      maxRedirects: opts.maxRedirects,
      logger: this.logger,
      countRequest: () => {
        this.requests++;
      },
    };
  }

  /** The keep-alive agent for `ep`'s TLS setting (HEAD requests get their own). */
  dispatcher(ep: Endpoint, forHead = false): Promise<Dispatcher> {
    return this.agents.dispatcher(ep, forHead);
  }

  async close(): Promise<void> {
    await this.agents.close();
  }

  /**
   * Send with retries. `consume` sees every final response that is not retryable by status
   * (2xx, 3xx without Location, 4xx) and must read or dump the body; errors it throws while
   * reading (resets, truncation: E_REGISTRY_NETWORK / E_TRUNCATED) are retried.
   */
  async send<T>(spec: RequestSpec, consume: (res: Response) => Promise<T>): Promise<T> {
    const ctx: ErrorContext = {
      host: spec.ep.host,
      repository: spec.ep.repository,
      what: spec.what,
      ...spec.context,
    };
    const overall = linkSignals(
      [spec.signal],
      spec.deadlineMs,
      () =>
        new StoreError('E_DEADLINE', `${spec.what} request deadline of ${spec.deadlineMs} ms exceeded`, ctx),
    );
    const started = Date.now();
    const policy = this.opts.retry;
    const attemptMs = spec.ep.options.requestTimeoutMs ?? this.opts.requestTimeoutMs;
    let lastErr: StoreError | undefined;
    try {
      for (let attempt = 0; ; attempt++) {
        const a = linkSignals([overall.signal], attemptMs, () => new AttemptTimeout(attemptMs, ctx));
        let retryAfterMs: number | undefined;
        try {
          const res = await sendAttempt(this.attemptDeps, spec, a.signal, ctx);
          if (isRetryableStatus(res.status)) {
            retryAfterMs = parseRetryAfter(res.headers['retry-after']);
            await dump(res);
            lastErr = new StoreError(
              'E_REGISTRY_STATUS',
              `${spec.what} request answered HTTP ${res.status}`,
              {
                ...ctx,
                status: res.status,
                ...(retryAfterMs !== undefined ? { retryAfterMs } : {}),
              },
            );
          } else {
            return await consume(res);
          }
        } catch (err) {
          if (overall.signal.aborted) throw abortedError(overall.signal, ctx);
          const e = this.classify(err, a.signal, ctx);
          if (!e.retryable) throw e.error;
          lastErr = e.error;
        } finally {
          a.dispose();
        }
        if (attempt >= (spec.maxRetries ?? policy.maxRetries)) {
          throw annotate(lastErr, { attempts: attempt + 1 });
        }
        const wait = backoffMs(policy, attempt, retryAfterMs);
        if (Date.now() - started + wait > spec.deadlineMs) {
          // waiting would overrun the deadline: report the real cause now instead
          throw annotate(lastErr, { attempts: attempt + 1, gaveUpBeforeDeadline: true });
        }
        this.logger.debug(
          {
            ...ctx,
            attempt: attempt + 1,
            waitMs: Math.round(wait),
            code: lastErr.code,
            status: lastErr.context.status,
          },
          'retrying registry request',
        );
        await sleep(wait, overall.signal);
      }
    } catch (err) {
      if (overall.signal.aborted && !(err instanceof StoreError)) throw abortedError(overall.signal, ctx);
      throw err;
    } finally {
      overall.dispose();
    }
  }

  private classify(
    err: unknown,
    attemptSignal: AbortSignal,
    ctx: ErrorContext,
  ): { retryable: boolean; error: StoreError } {
    if (attemptSignal.aborted && attemptSignal.reason instanceof AttemptTimeout) {
      return { retryable: true, error: attemptSignal.reason };
    }
    if (err instanceof StoreError) {
      const retryable = err.code === 'E_REGISTRY_NETWORK' || err.code === 'E_TRUNCATED';
      return { retryable, error: err };
    }
    const code = networkErrorCode(err);
    if (isTlsFailure(err)) {
      return {
        retryable: false,
        error: new StoreError(
          'E_REGISTRY_NETWORK',
          `TLS failure talking to ${String(ctx.host)}: ${code}`,
          { ...ctx, errno: code },
          { cause: err },
        ),
      };
    }
    return {
      retryable: isRetryableNetworkError(err),
      error: new StoreError(
        'E_REGISTRY_NETWORK',
        `network error talking to ${String(ctx.host)}: ${code}`,
        { ...ctx, errno: code },
        { cause: err },
      ),
    };
  }
}

function annotate(err: StoreError | undefined, extra: ErrorContext): StoreError {
  if (!err) return new StoreError('E_REGISTRY_NETWORK', 'request failed', extra);
  return new StoreError(err.code, err.message, { ...err.context, ...extra }, { cause: err.cause ?? err });
}
