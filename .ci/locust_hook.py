"""Loaded next to the reference's locust script by .ci/locust.sh: records every failed request
(method, path, status and the answer's error text) as JSON lines in $FAILURE_LOG, so that
locust_check.py can hold each failure against the SPEC's business-rule answers. It defines no
users and changes nothing the reference script does."""

import json
import os

from locust import events

LOG = os.environ["FAILURE_LOG"]


@events.request.add_listener
def record_failure(request_type, name, response, exception, **_kw):
    if exception is None:
        return
    status = getattr(response, "status_code", None)
    try:
        body = response.json()
    except Exception:  # the checker reports a body that is not JSON
        body = getattr(response, "text", None)
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({"method": request_type, "path": name, "status": status,
                            "body": body, "exception": repr(exception)}) + "\n")
