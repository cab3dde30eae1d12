{{/* Labels every object of the release carries. */}}
{{- define "tidings.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: tidings
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The watcher's selector labels (the same as the kustomize base's). */}}
{{- define "tidings.selector" -}}
app.kubernetes.io/name: tidings-watcher
{{- end }}

{{- define "tidings.image" -}}
{{- if not .Values.image.repository }}{{ fail "image.repository must be set" }}{{ end -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
