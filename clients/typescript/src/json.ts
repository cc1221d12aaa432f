// The service carries every JSON value as JSON text (`*_json` fields), so numbers arrive
// exactly as the server wrote them. JSON.parse would round an integer past 2^53; these
// helpers keep such integers as bigint, and write bigints back as plain digits.
import { isInteger, isSafeNumber, parse, stringify } from 'lossless-json';

export type JsonObject = { [key: string]: unknown };

function parseNumber(text: string): number | bigint {
  return isInteger(text) && !isSafeNumber(text) ? BigInt(text) : Number(text);
}

/** The object a `*_json` field holds ("" is {}); integers past 2^53 become bigint. */
export function parseJsonObject(text: string): JsonObject {
  if (text === '') return {};
  const value = parse(text, null, parseNumber);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new TypeError(`expected the JSON text of an object, got: ${text.slice(0, 60)}`);
  }
  return value as JsonObject;
}

/** The JSON text of an object for a `*_json` field; a bigint is written as its digits. */
export function stringifyJsonObject(value: JsonObject): string {
  return stringify(value) ?? '{}';
}
