tonic::include_proto!("inference");
