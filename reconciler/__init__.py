"""The reconciler process (the Procfile's `reconciler`): every record in status 3 has a report job."""
