{{/* Labels on every object, as the real chart sets them. */}}
{{- define "vcluster.labels" -}}
app: vcluster
chart: "{{ .Chart.Name }}-{{ .Chart.Version }}"
release: {{ .Release.Name | quote }}
heritage: {{ .Release.Service | quote }}
{{- end -}}

{{/* The syncer image: the chart's appVersion unless a tag is set. */}}
{{- define "vcluster.controlPlane.image" -}}
{{- $image := .Values.controlPlane.statefulSet.image -}}
{{ $image.registry }}/{{ $image.repository }}:{{ $image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Kubernetes distro image: controlPlane.distro.k8s.version wins over the image tag. */}}
{{- define "vcluster.k8s.image" -}}
{{- $k8s := .Values.controlPlane.distro.k8s -}}
{{ $k8s.image.registry }}/{{ $k8s.image.repository }}:{{ $k8s.version | default $k8s.image.tag }}
{{- end -}}

{{/* With the default (embedded SQLite) backing store, volumeClaim.enabled=auto means a volume. */}}
{{- define "vcluster.persistence.enabled" -}}
{{- $enabled := toString .Values.controlPlane.statefulSet.persistence.volumeClaim.enabled -}}
{{- if or (eq $enabled "true") (eq $enabled "auto") -}}true{{- end -}}
{{- end -}}
