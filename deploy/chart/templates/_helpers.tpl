{{/* The labels of every object. */}}
{{- define "meshnft.labels" -}}
app.kubernetes.io/name: meshnft
{{- end }}

{{/* The image reference. */}}
{{- define "meshnft.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
