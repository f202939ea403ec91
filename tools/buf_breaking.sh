#!/usr/bin/env bash
# buf breaking for the protos in the working tree, in two passes:
#   - the public API (common, the gateway, ToolService, HookService: what clients
#     ship) with FILE rules, buf.yaml's configuration, which ignores the rest;
#   - the services' internal APIs (sessions, runtime, policy.proto, context, models,
#     memory) with WIRE rules only: replicas of two versions talk during a rolling
#     upgrade, but nothing outside this repository builds on their generated code.
# Both against the last version of main they must stay compatible with:
#   - $BUF_BREAKING_AGAINST when set (any buf input, e.g. '.git#branch=main');
#   - else, with an upstream branch ahead of which HEAD has commits, the merge base
#     (a developer's local commits and edits, as a pull request would be checked);
#   - else the parent of the latest commit that changed protos/: in CI's fresh clone
#     of main (no upstream ahead of it), the last change to the contract is checked
#     even when later commits did not touch protos/.
# Uncommitted changes under protos/ are always part of what is checked. A deliberate
# break belongs in a new package version (cogmesh.<area>.v2), not in v1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUF=${BUF:-.tools/node_modules/.bin/buf}

against=${BUF_BREAKING_AGAINST:-}
if [[ -z "$against" ]]; then
    base=""
    if upstream=$(git rev-parse --verify --quiet '@{upstream}' 2>/dev/null) \
        && [[ "$upstream" != "$(git rev-parse HEAD)" ]]; then
        base=$(git merge-base HEAD "$upstream")
    else
        changed=$(git log -1 --format=%H -- protos/)
        if [[ -n "$changed" ]] && git rev-parse --verify --quiet "$changed~1^{commit}" >/dev/null; then
            base=$(git rev-parse "$changed~1")
        fi
    fi
    if [[ -z "$base" ]]; then
        if [[ "$(git rev-parse --is-shallow-repository)" == "true" ]]; then
            echo "buf breaking: shallow clone without the previous commit; fetch more history (git fetch --deepen=1)" >&2
            exit 1
        fi
        echo "buf breaking: no earlier commit to compare with (first commit); nothing to check"
        exit 0
    fi
    # A commit id as the ref: buf clones it from the local .git (no network), deep enough to reach it.
    against=".git#ref=$base,depth=$(($(git rev-list --count "$base..HEAD") + 1))"
fi
# The public files (protos/generate.py's PUBLIC_PROTOS), which the WIRE pass leaves to the FILE one.
public='"protos/cogmesh/common", "protos/cogmesh/gateway", "protos/cogmesh/tools", "protos/cogmesh/policy/v1/hooks.proto"'
# protos/buf is vendored (protovalidate's rules), ignored by both passes.
internal="{\"version\": \"v2\", \"modules\": [{\"path\": \"protos\"}], \"breaking\": {\"use\": [\"WIRE\"], \"ignore\": [$public, \"protos/buf\"]}}"
echo "buf breaking against $against: public protos (FILE)"
"$BUF" breaking --against "$against"
echo "buf breaking against $against: internal protos (WIRE)"
"$BUF" breaking --against "$against" --config "$internal" --against-config "$internal"
