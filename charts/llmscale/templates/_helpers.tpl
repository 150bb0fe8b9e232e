{{/* Name of the chart, overridable. */}}
{{- define "llmscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects (DNS-1123, at most 63 characters). */}}
{{- define "llmscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "llmscale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object of the release. The operator's own objects are managed by Helm, not
     by llmscale: app.kubernetes.io/managed-by=llmscale marks the engine children only, and
     the PodMonitor and the operator's indexes select on it. */}}
{{- define "llmscale.labels" -}}
helm.sh/chart: {{ include "llmscale.chart" . }}
{{ include "llmscale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llmscale
{{- end }}

{{- define "llmscale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmscale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "llmscale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "llmscale.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "llmscale.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Fail early on combinations the operator would refuse or run unsafely. */}}
{{- define "llmscale.validate" -}}
{{- if and (not .Values.watch.allNamespaces) (empty .Values.watch.namespaces) }}
{{- fail "watch.namespaces must list at least one namespace when watch.allNamespaces is false" }}
{{- end }}
{{- if and .Values.watch.allNamespaces (not (empty .Values.watch.namespaces)) }}
{{- fail "set either watch.allNamespaces or watch.namespaces, not both" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true: two standalone replicas would both scale" }}
{{- end }}
{{- end }}
