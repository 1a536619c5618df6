output "service_url" {
  description = "The replicas' HTTP API inside the cluster."
  value       = "http://${var.name}-sutra.${var.namespace}.svc:7480"
}
