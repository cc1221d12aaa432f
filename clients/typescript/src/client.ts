// The instance-ai service from a Node backend: one channel, the generated stubs, and the
// helpers a backend needs (API key, caller, TLS, deadlines, AbortSignal cancellation, an
// event stream that resumes by itself, JSON values kept exact).
import * as grpc from '@grpc/grpc-js';

import {
  AgentClient,
  CancelRunRequest,
  type CancelRunResponse,
  ConfirmRequest,
  DeleteThreadRequest,
  GetThreadStatusRequest,
  type GetThreadStatusResponse,
  SendMessageRequest,
  StreamEventsRequest,
  type StreamEventsResponse,
} from './gen/instance_ai/v1/agent.js';
import { BrowserClient } from './gen/instance_ai/v1/browser.js';
import { CredentialsClient } from './gen/instance_ai/v1/credentials.js';
import { GatewayClient } from './gen/instance_ai/v1/gateway.js';
import {
  BuildWorkflowRequest,
  type BuildWorkflowResponse,
  PipelineClient,
  VerifyWorkflowRequest,
} from './gen/instance_ai/v1/pipeline.js';
import { CallToolRequest, ListToolsRequest, ToolsClient } from './gen/instance_ai/v1/tools.js';
import { WorkspaceClient } from './gen/instance_ai/v1/workspace.js';
import { type StreamedEvent, toStreamedEvent } from './events.js';
import { type JsonObject, parseJsonObject, stringifyJsonObject } from './json.js';
import type { ConfirmResume } from './resume.js';

/** Who a call is for: the service scopes threads, credentials and workflows by them. */
/** A file attached to a message: its name (its extension picks the format), bytes, type. */
export interface MessageAttachment {
  name: string;
  data: Uint8Array;
  mimeType?: string;
}

export interface Caller {
  /** x-instance-ai-user (default on the server: local). */
  userId?: string;
  /** x-instance-ai-project: where new things go (default: personal). */
  projectId?: string;
  /** x-instance-ai-projects: the projects the user may see (default: projectId). */
  projectIds?: string[];
}

export interface TlsOptions {
  /** PEM of the CA to trust; omitted: the system's roots. */
  rootCerts?: Buffer;
  /** PEM key and certificate for mutual TLS. */
  privateKey?: Buffer;
  certChain?: Buffer;
}

export interface ClientOptions {
  /** host:port of the service. */
  address: string;
  /** Sent as `authorization: Bearer <key>` (INSTANCE_AI_API_KEYS on the server). */
  apiKey?: string;
  /** TLS to the service; omitted or false: plaintext (loopback and trusted networks only). */
  tls?: boolean | TlsOptions;
  /** Deadline of each unary call unless the call gives its own (default 60 s; 0: none). */
  deadlineMs?: number;
  caller?: Caller;
  /** The n8n API key the service acts with on the user's n8n (x-n8n-api-key). */
  n8nApiKey?: string;
  /** Unary calls wait for the service to be reachable (until their deadline) instead of
   * failing at once while it restarts (default true). */
  waitForReady?: boolean;
  channelOptions?: grpc.ChannelOptions;
}

export interface CallSettings {
  deadlineMs?: number;
  /** Aborting cancels the call (unary: rejects with CANCELLED; a stream: ends it). */
  signal?: AbortSignal;
  caller?: Caller;
  n8nApiKey?: string;
}

export interface StreamOptions extends Omit<CallSettings, 'deadlineMs'> {
  /** The id of the last event the caller has; omitted: the whole history. */
  after?: number | string;
  /** false: replay the history and end. true (default): then stay live. */
  follow?: boolean;
  /** How long to keep reconnecting while the service is unreachable (default 60 s). */
  reconnectForMs?: number;
  /** Told each time the stream reconnects: the service dropped this reader for lagging
   * (`lagged`) or could not be reached (`unavailable`); `after` is the cursor it resumes at. */
  onResume?: (reason: 'lagged' | 'unavailable', after: string) => void;
}

/** A failed call: the gRPC status (its name too) and the service's message. */
export class InstanceAiError extends Error {
  constructor(
    readonly code: grpc.status,
    readonly details: string,
    readonly metadata?: grpc.Metadata,
  ) {
    super(`${grpc.status[code]}: ${details}`);
    this.name = 'InstanceAiError';
  }

  get codeName(): string {
    return grpc.status[this.code];
  }
}

export interface ToolInfo {
  name: string;
  description: string;
  group: string;
  inputSchema: JsonObject;
  hitlAction: string;
  available: boolean;
  requires: string;
}

export interface ToolCallResult {
  result: JsonObject;
  /** true: the tool reported a correctable error, which `result` describes. */
  isError: boolean;
}

export interface VerifyOptions {
  threadId: string;
  workflowId: string;
  workItemId?: string;
  inputData?: JsonObject;
  triggerNodeName?: string;
  timeoutMs?: number;
  fixtureOverrides?: Record<string, JsonObject[]>;
  allowZeroItemFixtures?: boolean;
}

const DEFAULT_DEADLINE_MS = 60_000;
// grpc-js waits up to 120 s between reconnection attempts by default; a backend whose
// service restarts wants it back within seconds.
const DEFAULT_CHANNEL_OPTIONS: grpc.ChannelOptions = { 'grpc.max_reconnect_backoff_ms': 5_000 };
const FIRST_RETRY_MS = 100;
const LAST_RETRY_MS = 2_000;

type Callback<Res> = (error: grpc.ServiceError | null, response: Res) => void;
type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: grpc.Metadata,
  options: Partial<grpc.CallOptions>,
  callback: Callback<Res>,
) => grpc.ClientUnaryCall;

export class InstanceAiClient {
  /** The generated stubs, for every call the helpers do not cover. */
  readonly agent: AgentClient;
  readonly tools: ToolsClient;
  readonly pipeline: PipelineClient;
  readonly workspace: WorkspaceClient;
  readonly credentials: CredentialsClient;
  readonly browser: BrowserClient;
  readonly gateway: GatewayClient;

  constructor(private readonly options: ClientOptions) {
    const credentials = channelCredentials(options.tls);
    const channelOptions = { ...DEFAULT_CHANNEL_OPTIONS, ...options.channelOptions };
    this.agent = new AgentClient(options.address, credentials, channelOptions);
    // One channel for all: the other stubs ride on the agent's.
    const shared = { ...channelOptions, channelOverride: this.agent.getChannel() };
    this.tools = new ToolsClient(options.address, credentials, shared);
    this.pipeline = new PipelineClient(options.address, credentials, shared);
    this.workspace = new WorkspaceClient(options.address, credentials, shared);
    this.credentials = new CredentialsClient(options.address, credentials, shared);
    this.browser = new BrowserClient(options.address, credentials, shared);
    this.gateway = new GatewayClient(options.address, credentials, shared);
  }

  close(): void {
    this.agent.close();
  }

  /** Metadata of a call: API key, caller, n8n key (a call's own settings win). A stream
   * never waits for ready: it has no deadline, and reconnects by itself. */
  metadata(settings: CallSettings = {}, waitForReady = false): grpc.Metadata {
    const metadata = new grpc.Metadata({ waitForReady });
    if (this.options.apiKey) metadata.set('authorization', `Bearer ${this.options.apiKey}`);
    const caller = { ...this.options.caller, ...settings.caller };
    if (caller.userId) metadata.set('x-instance-ai-user', caller.userId);
    if (caller.projectId) metadata.set('x-instance-ai-project', caller.projectId);
    if (caller.projectIds) metadata.set('x-instance-ai-projects', caller.projectIds.join(','));
    const n8nKey = settings.n8nApiKey ?? this.options.n8nApiKey;
    if (n8nKey) metadata.set('x-n8n-api-key', n8nKey);
    return metadata;
  }

// -- the conversation ----------------------------------------------------------------------

  /**
   * Starts a run on the thread (created on first use); resolves to its run id. `attachments`:
   * files the user attached (the agent reads them with parse-file; at most 10, within the
   * server's size limits).
   */
  async sendMessage(
    threadId: string,
    message: string,
    settings: CallSettings & { messageId?: string; attachments?: MessageAttachment[] } = {},
  ): Promise<string> {
    const request = SendMessageRequest.fromPartial({
      threadId,
      message,
      messageId: settings.messageId ?? '',
      attachments: (settings.attachments ?? []).map((a) => ({
        name: a.name,
        mimeType: a.mimeType ?? '',
        data: Buffer.from(a.data),
      })),
    });
    const response = await this.unary(this.agent.sendMessage.bind(this.agent), request, settings);
    return response.runId;
  }

  /** Answers a confirmation card (`confirmation-request`); resolves to the resumed run's id. */
  async confirm(
    threadId: string,
    requestId: string,
    resume: ConfirmResume,
    settings: CallSettings = {},
  ): Promise<string> {
    const request = ConfirmRequest.fromPartial({
      threadId,
      requestId,
      resumeJson: stringifyJsonObject(resume as unknown as JsonObject),
    });
    const response = await this.unary(this.agent.confirm.bind(this.agent), request, settings);
    return response.runId;
  }

  cancelRun(threadId: string, settings: CallSettings = {}): Promise<CancelRunResponse> {
    const request = CancelRunRequest.fromPartial({ threadId });
    return this.unary(this.agent.cancelRun.bind(this.agent), request, settings);
  }

  threadStatus(threadId: string, settings: CallSettings = {}): Promise<GetThreadStatusResponse> {
    const request = GetThreadStatusRequest.fromPartial({ threadId });
    return this.unary(this.agent.getThreadStatus.bind(this.agent), request, settings);
  }

  async deleteThread(threadId: string, settings: CallSettings = {}): Promise<void> {
    const request = DeleteThreadRequest.fromPartial({ threadId });
    await this.unary(this.agent.deleteThread.bind(this.agent), request, settings);
  }

  /**
   * The thread's events in n8n's shape, durable ones replayed after `after`, then (with
   * `follow`) live ones as they happen. A dropped connection, a restarting service or a
   * lagging reader (ABORTED) is resumed from the last durable id seen, so durable events
   * arrive once each, in order; live-only events of the gap are not replayed. Ends when the
   * service ends the stream or the signal aborts; any other failure is thrown.
   */
  async *streamEvents(threadId: string, options: StreamOptions = {}): AsyncGenerator<StreamedEvent> {
    let cursor = options.after === undefined ? '' : String(options.after);
    const reconnectForMs = options.reconnectForMs ?? 60_000;
    let retryMs = FIRST_RETRY_MS;
    let failingSince: number | undefined;
    while (!options.signal?.aborted) {
      const request = StreamEventsRequest.fromPartial({
        threadId,
        after: cursor,
        follow: options.follow ?? true,
      });
      const call = this.agent.streamEvents(request, this.metadata(options));
      const stop = (): void => call.cancel();
      options.signal?.addEventListener('abort', stop, { once: true });
      try {
        for await (const response of call as AsyncIterable<StreamEventsResponse>) {
          failingSince = undefined;
          retryMs = FIRST_RETRY_MS;
          if (!response.event) continue;
          const event = toStreamedEvent(response.event);
          if (event.id !== undefined) cursor = String(event.id);
          yield event;
        }
        return;
      } catch (error) {
        if (options.signal?.aborted) return;
        const failure = asServiceError(error);
        // Lagged: the service dropped this reader; come back at once from the cursor.
        if (failure.code === grpc.status.ABORTED) {
          options.onResume?.('lagged', cursor);
          continue;
        }
        if (failure.code !== grpc.status.UNAVAILABLE) throw toInstanceAiError(failure);
        failingSince ??= Date.now();
        if (Date.now() - failingSince > reconnectForMs) throw toInstanceAiError(failure);
        await sleep(retryMs, options.signal);
        retryMs = Math.min(retryMs * 2, LAST_RETRY_MS);
        options.onResume?.('unavailable', cursor);
      } finally {
        options.signal?.removeEventListener('abort', stop);
        call.cancel();
      }
    }
  }

  // -- tools ---------------------------------------------------------------------------------

  async listTools(
    settings: CallSettings & { includeUnavailable?: boolean } = {},
  ): Promise<ToolInfo[]> {
    const request = ListToolsRequest.fromPartial({
      includeUnavailable: settings.includeUnavailable ?? false,
    });
    const response = await this.unary(this.tools.listTools.bind(this.tools), request, settings);
    return response.tools.map(({ inputSchemaJson, ...tool }) => ({
      ...tool,
      inputSchema: parseJsonObject(inputSchemaJson),
    }));
  }

  /** Calls one of the agent's tools directly in a thread (gated tools ask like in a run). */
  async callTool(
    threadId: string,
    toolName: string,
    args: JsonObject = {},
    settings: CallSettings = {},
  ): Promise<ToolCallResult> {
    const request = CallToolRequest.fromPartial({
      threadId,
      toolName,
      argumentsJson: stringifyJsonObject(args),
    });
    const response = await this.unary(this.tools.callTool.bind(this.tools), request, settings);
    return { result: parseJsonObject(response.resultJson), isError: response.isError };
  }

  // -- the pipeline --------------------------------------------------------------------------

  /** Compiles, validates and saves the workflow file at `filePath` in the thread's workspace. */
  buildWorkflow(
    request: Partial<BuildWorkflowRequest> & { threadId: string; filePath: string },
    settings: CallSettings = {},
  ): Promise<BuildWorkflowResponse> {
    const message = BuildWorkflowRequest.fromPartial(request);
    return this.unary(this.pipeline.buildWorkflow.bind(this.pipeline), message, settings);
  }

  /** Runs a built workflow with side effects simulated; resolves to the verification result
   * (executionId, success, status, claim, nodePreviews, simulatedNodes, coverage, ...). */
  async verifyWorkflow(options: VerifyOptions, settings: CallSettings = {}): Promise<JsonObject> {
    const request = VerifyWorkflowRequest.fromPartial({
      threadId: options.threadId,
      workflowId: options.workflowId,
      workItemId: options.workItemId ?? '',
      inputDataJson: options.inputData ? stringifyJsonObject(options.inputData) : '',
      triggerNodeName: options.triggerNodeName ?? '',
      timeoutMs: options.timeoutMs ?? 0,
      fixtureOverridesJson: options.fixtureOverrides
        ? stringifyJsonObject(options.fixtureOverrides)
        : '',
      allowZeroItemFixtures: options.allowZeroItemFixtures ?? false,
    });
    const response = await this.unary(
      this.pipeline.verifyWorkflow.bind(this.pipeline),
      request,
      settings,
    );
    return parseJsonObject(response.resultJson);
  }

  // -- plumbing ------------------------------------------------------------------------------

  /** A unary call as a promise, with the deadline, metadata and cancellation applied. */
  unary<Req, Res>(
    method: UnaryMethod<Req, Res>,
    request: Req,
    settings: CallSettings = {},
  ): Promise<Res> {
    const signal = settings.signal;
    if (signal?.aborted) {
      return Promise.reject(new InstanceAiError(grpc.status.CANCELLED, 'aborted before the call'));
    }
    const deadlineMs = settings.deadlineMs ?? this.options.deadlineMs ?? DEFAULT_DEADLINE_MS;
    const callOptions: Partial<grpc.CallOptions> =
      deadlineMs > 0 ? { deadline: new Date(Date.now() + deadlineMs) } : {};
    const metadata = this.metadata(settings, this.options.waitForReady ?? true);
    return new Promise((resolve, reject) => {
      const call = method(request, metadata, callOptions, (error, response) => {
        signal?.removeEventListener('abort', stop);
        if (error) reject(toInstanceAiError(error));
        else resolve(response);
      });
      const stop = (): void => call.cancel();
      signal?.addEventListener('abort', stop, { once: true });
    });
  }
}

function channelCredentials(tls: ClientOptions['tls']): grpc.ChannelCredentials {
  if (!tls) return grpc.credentials.createInsecure();
  const given = tls === true ? {} : tls;
  return grpc.credentials.createSsl(
    given.rootCerts ?? null,
    given.privateKey ?? null,
    given.certChain ?? null,
  );
}

function asServiceError(error: unknown): grpc.ServiceError {
  if (error && typeof error === 'object' && 'code' in error) return error as grpc.ServiceError;
  throw error;
}

function toInstanceAiError(error: grpc.ServiceError): InstanceAiError {
  return new InstanceAiError(error.code, error.details, error.metadata);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
