{{/* Names shared by every template; the RBAC resourceNames depend on them. */}}

{{- define "gto.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gto.serviceAccountName" -}}
{{- default (include "gto.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The ClusterRole the operator binds itself to, by RoleBinding, in each tenant namespace. */}}
{{- define "gto.tenantNamespaceRole" -}}
{{- printf "%s-tenant-namespace" (include "gto.fullname" .) -}}
{{- end -}}

{{/* The guard's Service; its DNS name is what the API server dials (and the certificate names). */}}
{{- define "gto.webhookName" -}}
{{- printf "%s-guard" (include "gto.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The guard's certificate Secret: the user's, else the chart's own when several replicas must
share one; empty: the operator generates its own. */}}
{{- define "gto.webhookSecret" -}}
{{- if .Values.webhook.certificateSecret -}}
{{- .Values.webhook.certificateSecret -}}
{{- else if gt (int .Values.replicas) 1 -}}
{{- printf "%s-tls" (include "gto.webhookName" .) -}}
{{- end -}}
{{- end -}}

{{- define "gto.webhookHost" -}}
{{- printf "%s.%s.svc" (include "gto.webhookName" .) .Release.Namespace -}}
{{- end -}}

{{- define "gto.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gto.labels" -}}
{{ include "gto.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gto.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The OperatorConfig document: the user's `config` values plus what only the chart knows. */}}
{{- define "gto.operatorConfig" -}}
{{- $fromChart := dict "operatorNamespace" .Release.Namespace "operatorServiceAccount" (include "gto.serviceAccountName" .) "tenantNamespaceClusterRole" (include "gto.tenantNamespaceRole" .) -}}
{{- $_ := set $fromChart "fleet" (dict "applicationSetName" (printf "%s-fleet" (include "gto.fullname" .))) -}}
{{- if not (hasKey .Values.config "apiServerNetworks") -}}
{{- $_ := merge $fromChart (include "gto.apiServerEndpoints" . | fromYaml) -}}
{{- end -}}
{{- toYaml (merge $fromChart (deepCopy .Values.config)) -}}
{{- end -}}

{{/* The operator's command line: the same `gputenant run` the tests and the Dockerfile use. */}}
{{- define "gto.command" -}}
- gputenant
- run
- --config
- /etc/gputenant/config.yaml
- --liveness
- {{ printf "http://0.0.0.0:%d%s" (int .Values.liveness.port) .Values.liveness.path }}
- --leader-elect
- --leader-elect-lease
- {{ include "gto.fullname" . }}
{{- if .Values.webhook.enabled }}
- --webhook-host
- {{ include "gto.webhookHost" . }}
- --webhook-port
- {{ .Values.webhook.port | quote }}
- --webhook-conversion-port
- {{ .Values.webhook.conversionPort | quote }}
- --webhook-listen
- 0.0.0.0
{{- if include "gto.webhookSecret" . }}
- --webhook-cert
- /etc/gputenant/webhook-tls/tls.crt
- --webhook-key
- /etc/gputenant/webhook-tls/tls.key
- --webhook-ca
- /etc/gputenant/webhook-tls/ca.crt
{{- else }}
- --webhook-cert-dir
- /tmp/webhook-certs
{{- end }}
{{- if eq (include "gto.clientCA" .) "ConfigMap" }}
- --webhook-client-ca
- /etc/gputenant/webhook-client-ca/ca.crt
{{- else if eq (include "gto.clientCA" .) "FrontProxy" }}
- --webhook-client-ca-from-cluster
{{- end }}
{{- end }}
{{- if .Values.metrics.enabled }}
- --metrics-address
- {{ printf "0.0.0.0:%d" (int .Values.metrics.port) }}
{{- end }}
{{- with .Values.usage.prometheusUrl }}
- --prometheus-url
- {{ . | quote }}
- --usage-window
- {{ $.Values.usage.window | quote }}
{{- end }}
{{- if .Values.logs.json }}
- --json-logs
{{- end }}
{{- if .Values.logs.verbose }}
- --verbose
{{- end }}
{{- end -}}

{{/* apiServerNetworks and apiServerPort from the EndpointSlice of Service default/kubernetes (its
IPv4 addresses); empty where Helm cannot read the cluster (`helm template`). */}}
{{- define "gto.apiServerEndpoints" -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" -}}
{{- $networks := list -}}
{{- range ($slice.endpoints | default list) -}}
{{- range .addresses -}}
{{- if not (contains ":" .) -}}
{{- $networks = append $networks (printf "%s/32" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $networks -}}
apiServerNetworks: {{ toJson $networks }}
apiServerPort: {{ (index $slice.ports 0).port }}
{{- end -}}
{{- end -}}

{{/* Where the guard's client CA comes from (values webhook.clientCA): FrontProxy, ConfigMap or None.
A clientCAConfigMap with the default FrontProxy is an old values file: say what to set, not guess. */}}
{{- define "gto.clientCA" -}}
{{- $source := .Values.webhook.clientCA -}}
{{- if and (eq $source "ConfigMap") (not .Values.webhook.clientCAConfigMap) -}}
{{- fail "webhook.clientCA is ConfigMap: set webhook.clientCAConfigMap to the ConfigMap holding ca.crt" -}}
{{- end -}}
{{- if and (ne $source "ConfigMap") .Values.webhook.clientCAConfigMap -}}
{{- fail (printf "webhook.clientCAConfigMap is set but webhook.clientCA is %s: set webhook.clientCA to ConfigMap to use it, or unset clientCAConfigMap" $source) -}}
{{- end -}}
{{- $source -}}
{{- end -}}
