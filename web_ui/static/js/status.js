// A site's connection status: the browser's copy of contracts/status.py (the one home of the names).
//
// RCM reports each peer `connected`, `suspected` or `disconnected`; a client shows
// `unknown` for a site no status has been reported for yet, and for any word it
// does not know (a newer server's), the same way as the terminal clients. The copy
// is tested value for value against contracts.status (tests/web_ui/test_web_contracts.py).

export const CONNECTED = "connected";
export const SUSPECTED = "suspected";
export const DISCONNECTED = "disconnected";
export const UNKNOWN = "unknown";
export const STATUSES = [CONNECTED, SUSPECTED, DISCONNECTED, UNKNOWN];
export const REPORTED = [CONNECTED, SUSPECTED, DISCONNECTED];

/** The status a frame's `status` is shown as: its name, `unknown` for anything else. */
export function statusOf(value) {
  return STATUSES.includes(value) ? value : UNKNOWN;
}
