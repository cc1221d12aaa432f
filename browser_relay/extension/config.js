// Where this build of the extension may connect, besides loopback (127.0.0.1, localhost,
// [::1]): the service's public origin(s), e.g. 'https://ai.example.com'. Filled in when the
// extension is packaged for a deployment; empty, it connects to loopback only.
export const SERVICE_ORIGINS = [];
