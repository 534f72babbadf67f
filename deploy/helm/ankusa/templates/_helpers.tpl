{{- define "ankusa.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The fullname prefixes the pod names, which become node ids
([a-z0-9._-]{1,64}): keep it short and lowercase.
*/}}
{{- define "ankusa.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ankusa.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ankusa.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ankusa.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ankusa.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "ankusa.secretName" -}}
{{- if .Values.secret.create -}}
{{- include "ankusa.fullname" . -}}
{{- else -}}
{{- required "secret.existingSecret is required when secret.create is false" .Values.secret.existingSecret -}}
{{- end -}}
{{- end -}}

{{/* The per-pod keys, forced through ANKUSA_* (they override the file). */}}
{{- define "ankusa.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: ANKUSA_INSTANCE
  value: $(POD_NAME)
- name: ANKUSA_INTAKE_NODE_ID
  value: $(POD_NAME)
- name: ANKUSA_DATA_DIR
  value: /data
- name: ANKUSA_HTTP_IP
  value: 0.0.0.0
- name: ANKUSA_HTTP_PORT
  value: {{ .Values.ports.ingest | quote }}
- name: ANKUSA_ADMIN_IP
  value: 0.0.0.0
- name: ANKUSA_ADMIN_PORT
  value: {{ .Values.ports.admin | quote }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ankusa.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
