export {
  type Caller,
  type CallSettings,
  type ClientOptions,
  InstanceAiClient,
  InstanceAiError,
  type MessageAttachment,
  type StreamOptions,
  type TlsOptions,
  type ToolCallResult,
  type ToolInfo,
  type VerifyOptions,
} from './client.js';
export { isEvent, type StreamedEvent, type StreamedEventOf, toStreamedEvent } from './events.js';
export { type JsonObject, parseJsonObject, stringifyJsonObject } from './json.js';
export type { ConfirmResume, ConfirmResumeKind } from './resume.js';
export { status } from '@grpc/grpc-js';
// The generated messages and stubs, per service of the contract.
export * as agentProto from './gen/instance_ai/v1/agent.js';
export * as browserProto from './gen/instance_ai/v1/browser.js';
export * as gatewayProto from './gen/instance_ai/v1/gateway.js';
export * as credentialsProto from './gen/instance_ai/v1/credentials.js';
export * as eventsProto from './gen/instance_ai/v1/events.js';
export * as pipelineProto from './gen/instance_ai/v1/pipeline.js';
export * as toolsProto from './gen/instance_ai/v1/tools.js';
export * as workspaceProto from './gen/instance_ai/v1/workspace.js';
