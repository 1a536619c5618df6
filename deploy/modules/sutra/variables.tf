variable "name" {
  description = "The Helm release's name; the replicas' Deployment and Service are named after it."
  type        = string
  default     = "sutra"
}

variable "namespace" {
  description = "The Kubernetes namespace to install into."
  type        = string
  default     = "sutra"
}

variable "image" {
  description = "The image repository and tag of deploy/docker/Dockerfile's build."
  type = object({
    repository = string
    tag        = string
  })
}

variable "replicas" {
  description = "Replicas without KEDA, and KEDA's bounds with it."
  type = object({
    min = number
    max = number
  })
  default = { min = 2, max = 10 }
}

variable "database_secret" {
  description = "A Secret holding `datasource` (the serving role, a member of sutra_app), `system-url` (the role of the cross-tenant work, a member of sutra_system) and `migrate-url` (the schema's owner)."
  type        = string
}

variable "tokens_secret" {
  description = "A Secret holding `tokens`: the API tokens, as sutra.auth.tokens-file reads them."
  type        = string
}

variable "keda" {
  description = "Scale on the backlog with KEDA's PostgreSQL scaler (SPEC §8)."
  type        = bool
  default     = false
}

variable "target_backlog_per_replica" {
  description = "The waiting work KEDA aims at per replica."
  type        = number
  default     = 100
}
