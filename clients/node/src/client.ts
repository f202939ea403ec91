// CogmeshClient: the client for Node, over gRPC (HTTP/2) to the gateway's gRPC port.
//
// - Auth: `apiKey` goes out as `authorization: Bearer <key>` on every call.
// - Everything else (deadlines, retries, rate limits, resume) is CogmeshClientBase's (core.ts).
import type { SecureClientSessionOptions } from "node:http2";

import type { Interceptor, Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import { bearer, CogmeshClientBase, type CallOptions } from "./core.js";

export const DEFAULT_ADDRESS = "127.0.0.1:50051";

export interface TlsOptions {
  /** PEM root certificates to trust instead of the system's (a private CA). */
  ca?: string | Buffer;
  /** PEM client certificate, for mutual TLS. */
  cert?: string | Buffer;
  /** PEM client private key, for mutual TLS. */
  key?: string | Buffer;
}

export interface ClientOptions extends CallOptions {
  /** Gateway as "host:port" or a URL ("https://host:port"). Default: $COGMESH_GATEWAY_ADDR, else 127.0.0.1:50051. */
  address?: string;
  /** API key sent as `authorization: Bearer <key>`. Default: $COGMESH_API_KEY. */
  apiKey?: string;
  /** TLS: `true` with the system's roots, or PEM material for a private CA / mTLS. Default: plaintext. */
  tls?: boolean | TlsOptions;
  /** Extra Connect interceptors (tracing, logging), run after the auth header is set. */
  interceptors?: Interceptor[];
  /** Use this Connect transport instead of building one (the caller owns it and sets its auth and TLS). */
  transport?: Transport;
}

function baseUrl(address: string, tls: boolean): string {
  if (/^https?:\/\//.test(address)) return address;
  return `${tls ? "https" : "http"}://${address}`;
}

// The transport the options ask for, and the HTTP/2 sessions to close with the client (none when given one).
function nodeTransport(options: ClientOptions): { transport: Transport; sessions?: Http2SessionManager } {
  if (options.transport) {
    const clash = (["address", "apiKey", "tls", "interceptors"] as const).filter((k) => options[k] !== undefined);
    if (clash.length > 0)
      throw new TypeError(`transport cannot be combined with ${clash.join(", ")}: set them on the transport`);
    return { transport: options.transport };
  }
  const address = options.address ?? process.env.COGMESH_GATEWAY_ADDR ?? DEFAULT_ADDRESS;
  const apiKey = options.apiKey ?? process.env.COGMESH_API_KEY ?? "";
  const interceptors = [...(apiKey ? [bearer(apiKey)] : []), ...(options.interceptors ?? [])];
  const url = baseUrl(address, Boolean(options.tls));
  const nodeOptions: SecureClientSessionOptions = typeof options.tls === "object" ? { ...options.tls } : {};
  const sessions = new Http2SessionManager(url, {}, nodeOptions);
  return { transport: createGrpcTransport({ baseUrl: url, sessionManager: sessions, interceptors }), sessions };
}

export class CogmeshClient extends CogmeshClientBase {
  /** The gateway's address ("" when built on a caller's transport). */
  readonly address: string;

  constructor(options: ClientOptions = {}) {
    const { transport, sessions } = nodeTransport(options);
    super(transport, options, () => sessions?.abort());
    this.address = options.transport ? "" : (options.address ?? process.env.COGMESH_GATEWAY_ADDR ?? DEFAULT_ADDRESS);
  }
}
