-- Argo CD health check for gputenant.io/GpuTenant (argocd-cm key
-- resource.customizations.health.gputenant.io_GpuTenant). Argo CD sets the global `obj` and
-- expects {status, message}. Only Argo's base and table libraries are available, so no string.*.
--
-- Suspended: deletion is blocked by spec.preventDeletion (condition DeletionPrevented=True, or
-- any condition with reason DeletionPrevented). While metadata.deletionTimestamp is set, Argo CD
-- (gitops-engine's pendingDeletionHealth, v3.6) reports "Progressing: Pending deletion" unless the
-- script sets hs.deletionMessage: the blocked branch sets it, so a blocked deletion shows Suspended.
-- Suspended too: the tenant sleeps (spec.sleep; condition Asleep=True), so its Ready=False/Asleep
-- is the platform's choice, not a fault.
--
-- Progressing, not Degraded: Ready=False with a reason of `waits` while the tenant is onboarding
-- (no KubeconfigReady condition yet: its control plane has never served). Once it has, the same
-- reasons mean something that worked stopped working (a control-plane pod died), and are Degraded.
local hs = {}

-- The reasons of api/conditions.py WAITS (operator/tests/test_argocd_health.py keeps them equal).
local waits = {
  Asleep = true, ControlPlaneNotAnswering = true, ControlPlaneRollingOut = true,
  ControlPlaneStarting = true, LoadBalancerPending = true, NamespaceTerminating = true, Progressing = true,
  WaitingForAccess = true, WaitingForControlPlane = true,
}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function deletion_prevented()
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if (c.type == "DeletionPrevented" and c.status == "True") or c.reason == "DeletionPrevented" then
      return c
    end
  end
  return nil
end

local blocked = deletion_prevented()
if blocked ~= nil then
  hs.status = "Suspended"
  hs.message = "Deletion is blocked by spec.preventDeletion: " .. (blocked.message or "")
  hs.deletionMessage = hs.message
  return hs
end

if obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  return hs
end

if obj.status == nil or obj.status.observedGeneration == nil
    or obj.status.observedGeneration < (obj.metadata.generation or 0) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to reconcile generation " .. tostring(obj.metadata.generation or 0)
  return hs
end

local asleep = condition("Asleep")
if asleep ~= nil and asleep.status == "True" then
  hs.status = "Suspended"
  hs.message = "Asleep (" .. (asleep.reason or "SleepRequested") .. "): " .. (asleep.message or "")
  return hs
end

local ready = condition("Ready")
if ready == nil or ready.status == "Unknown" then
  hs.status = "Progressing"
  hs.message = "Ready is not reported yet"
  if ready ~= nil and ready.message ~= nil and ready.message ~= "" then
    hs.message = (ready.reason or "Unknown") .. ": " .. ready.message
  end
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end

if ready.reason ~= nil and waits[ready.reason] and condition("KubeconfigReady") == nil then
  hs.status = "Progressing"
  hs.message = ready.reason .. ": " .. (ready.message or "")
  return hs
end

hs.status = "Degraded"
hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
return hs
