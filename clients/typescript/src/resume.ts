// The answers `Agent.Confirm` takes, one per kind of confirmation card (the service refuses
// any other shape with INVALID_ARGUMENT).

export type ConfirmResume =
  | { kind: 'approval'; approved: boolean; userInput?: string; scope?: 'once' | 'session' }
  | {
      kind: 'questions';
      answers: Array<{
        questionId: string;
        selectedOptions?: string[];
        customText?: string;
        skipped?: boolean;
      }>;
    }
  /** Credential id per credential type the card asked for. */
  | { kind: 'credentialSelection'; credentials: Record<string, string> }
  | { kind: 'credentialAutoSetup'; credentialType: string; attemptId?: string }
  | { kind: 'domainAccessApprove'; domainAccessAction: 'allow_once' | 'allow_domain' | 'allow_all' }
  | { kind: 'domainAccessDeny' }
  | { kind: 'planDeny' }
  | { kind: 'resourceDecision'; resourceDecision: 'denyOnce' | 'allowOnce' | 'allowForSession' }
  | {
      kind: 'setupWorkflowApply';
      nodeCredentials?: Record<string, unknown>;
      nodeParameters?: Record<string, unknown>;
      skippedNodes?: string[];
    }
  | { kind: 'setupWorkflowTestTrigger'; testTriggerNode: string }
  | { kind: 'mcpConnect'; approved: boolean };

export type ConfirmResumeKind = ConfirmResume['kind'];
