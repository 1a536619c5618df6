{{- define "sutra.name" -}}{{ .Release.Name }}-sutra{{- end -}}
{{- define "sutra.labels" -}}
app.kubernetes.io/name: sutra
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "sutra.databaseSecret" -}}{{ .Values.database.existingSecret | default (printf "%s-database" (include "sutra.name" .)) }}{{- end -}}
{{- define "sutra.tokensSecret" -}}{{ .Values.auth.existingSecret | default (printf "%s-tokens" (include "sutra.name" .)) }}{{- end -}}
