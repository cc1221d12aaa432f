// Streamed events in the shape of n8n's event contract (`instanceAiEventSchema` of
// @n8n/api-types): the editor's own union, plus the service's event id and thread id.
import type { InstanceAiEvent } from '@n8n/api-types';

import type { Event } from './gen/instance_ai/v1/events.js';
import { parseJsonObject } from './json.js';

/** One event of a thread's stream: n8n's union, with `id` on durable events (per thread,
 * strictly increasing, stable across restarts; absent on live-only ones) and `threadId`. */
export type StreamedEvent = InstanceAiEvent & { id?: number; threadId: string };

export type StreamedEventOf<T extends StreamedEvent['type']> = Extract<StreamedEvent, { type: T }>;

/** A protobuf `Event` in n8n's shape: `ts` in milliseconds since the epoch. */
export function toStreamedEvent(event: Event): StreamedEvent {
  const shaped = {
    type: event.type,
    runId: event.runId,
    agentId: event.agentId,
    ts: event.ts ? event.ts.getTime() : Date.now(),
    payload: parseJsonObject(event.payloadJson),
    threadId: event.threadId,
    ...(event.id === undefined ? {} : { id: event.id }),
  };
  return shaped as unknown as StreamedEvent;
}

/** Narrows an event to one type: `if (isEvent(e, 'tool-call')) e.payload.toolName`. */
export function isEvent<T extends StreamedEvent['type']>(
  event: StreamedEvent,
  type: T,
): event is StreamedEventOf<T> {
  return event.type === type;
}
