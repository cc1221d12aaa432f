// The names the per-node parameter types in node-definitions use without importing them.
// With these, `node<HttpRequestV42Node>({...})` makes the TypeScript check catch a misspelled
// parameter key or a value outside an option list. See knowledge-base/best-practices.
import type {
  CredentialReference as SdkCredentialReference,
  IDataObject as SdkDataObject,
  NewCredentialValue,
  NodeConfig as SdkNodeConfig,
} from '@n8n/workflow-sdk';

declare global {
  type Expression<T> = `=${string}`;
  type NodeConfig<T> = SdkNodeConfig<T>;
  type CredentialReference = SdkCredentialReference | NewCredentialValue;
  type IDataObject = SdkDataObject;
}

export {};
